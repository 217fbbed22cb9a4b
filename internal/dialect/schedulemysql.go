package dialect

// The schedule statements MariaDB and MySQL write their own way: an upsert
// is INSERT ... ON DUPLICATE KEY UPDATE, an insert that may meet its row is
// INSERT IGNORE (one affected row: it won), and an UPDATE returns nothing,
// so the claims of shares read what they claimed by their token, which is
// the claim's own.
func (d *Dialect) mysqlSchedule(s *ScheduleSQL, t Times) {
	hb, mo, sh, in := d.Quote(ScheduleHeartbeats), d.Quote(ScheduleMoments), d.Quote(ScheduleShares), d.Quote(ScheduleInstances)
	x := func(sql string) text { return d.text(sql, t) }
	s.Beat = ScheduleBeatSQL{x(`INSERT INTO ` + hb + ` (schedule, instance, runners, expires_at, spec, placement, next_at, runs, failures, last_error, last_error_at)
VALUES ($1, $2, $3, ` + t.At(4) + `, $5, $6, $7, $8, $9, $10, $11)
ON DUPLICATE KEY UPDATE runners = VALUES(runners), expires_at = VALUES(expires_at), spec = VALUES(spec), placement = VALUES(placement),
next_at = VALUES(next_at), runs = VALUES(runs), failures = VALUES(failures), last_error = VALUES(last_error), last_error_at = VALUES(last_error_at)`)}
	// An UPDATE counts the rows it matched (clientFoundRows), so a renewal
	// to the expiry the row has still counts; an upsert would count the
	// refused renewal of another's name as well.
	s.Hold = ScheduleHoldSQL{x(`UPDATE ` + in + ` SET token = $2, expires_at = ` + t.At(3) + ` WHERE instance = $1 AND (token = $2 OR expires_at <= ` + t.At(4) + `)`)}
	s.HoldNew = ScheduleHoldSQL{x(`INSERT IGNORE INTO ` + in + ` (instance, token, expires_at) VALUES ($1, $2, ` + t.At(3) + `)`)}
	s.Claim = ScheduleClaimSQL{x(`INSERT IGNORE INTO ` + mo + ` (schedule, fired_at, writer, members, created_at) VALUES ($1, $2, $3, $4, ` + t.At(5) + `)`)}
	// A DELETE may not read its own table in a subquery there: the latest
	// moment of each schedule comes from a derived table, which an
	// aggregate keeps from being merged into the DELETE.
	s.PruneMoments = SchedulePruneSQL{x(`DELETE m FROM ` + mo + ` m
JOIN (SELECT schedule, MAX(fired_at) AS latest FROM ` + mo + ` GROUP BY schedule) l ON l.schedule = m.schedule
WHERE m.fired_at < ` + t.At(1) + ` AND m.created_at < ` + t.At(1) + ` AND m.fired_at < l.latest`)}
	s.TakeDealt = ScheduleTakeDealtSQL{
		text: x(`UPDATE ` + sh + ` SET holder = $1, token = $2, locked_until = ` + t.At(3) + `
WHERE schedule = $4 AND moment = $5 AND dealt_to = $1 AND holder IS NULL`),
		read: x(`SELECT ` + shareCols + ` FROM ` + sh + ` WHERE token = $1 AND schedule = $2 AND moment = $3`),
	}
	s.TakeOver = ScheduleTakeOverSQL{
		text: x(`UPDATE ` + sh + ` SET holder = $1, token = $2, locked_until = ` + t.At(3) + `
WHERE schedule = $4 AND moment = $5 AND worker = $6 AND locked_until <= ` + t.At(7) + ` AND done_at IS NULL`),
		read: x(`SELECT ` + shareCols + ` FROM ` + sh + ` WHERE token = $1 AND schedule = $2 AND moment = $3 AND worker = $4`),
	}
}
