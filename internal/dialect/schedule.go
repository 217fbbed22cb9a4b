package dialect

import (
	"fmt"
	"strings"
	"time"
)

// The schedule package's tables, created by migrations.ApplySchedules.
const (
	// ScheduleHeartbeats holds one row per (schedule, instance): the
	// instance's runners for the schedule and when its heartbeat expires.
	ScheduleHeartbeats = "sqlinbox_schedule_heartbeats"
	// ScheduleMoments holds one row per (schedule, fired_at): the instance
	// that wrote it first and the membership it saw.
	ScheduleMoments = "sqlinbox_schedule_moments"
	// ScheduleShares holds one row per share of a moment not yet done:
	// whom it was dealt to, who holds it and until when (its lease).
	ScheduleShares = "sqlinbox_schedule_shares"
	// ScheduleInstances holds one row per running scheduler: its instance
	// name, the random token of the scheduler that holds the name, and
	// when that hold expires. It keeps two schedulers off one name.
	ScheduleInstances = "sqlinbox_schedule_instances"
)

// ScheduleSQL is every statement the schedule package runs, written once
// for both engines and rebound for one. Each is a type whose Call takes its
// parameters by name and type (scheduleargs.go). Times go through the Times
// it was made with, so a fake clock reaches them and a database clock reads
// the engine's now(). A share's moment is kept as Unix milliseconds.
type ScheduleSQL struct {
	// Beat upserts a heartbeat of an instance for a schedule: its runners
	// and expiry, and what operators read (spec, placement, next moment,
	// runs and failures since the instance started, the last failure).
	Beat ScheduleBeatSQL
	// Hold takes or renews an instance name for a token unless another
	// token holds it past now. No affected row: another live scheduler has
	// the name (or, where HoldNew is set, nobody holds it yet).
	Hold ScheduleHoldSQL
	// HoldNew, on MySQL, takes an instance name nobody holds, run when Hold
	// (an UPDATE there) changed nothing; no affected row: another live
	// scheduler has the name. Its SQL is "" where Hold inserts too.
	HoldNew ScheduleHoldSQL
	// HoldUntil reads when the hold on an instance name expires.
	HoldUntil ScheduleInstanceSQL
	// Leave deletes every heartbeat of an instance.
	Leave ScheduleInstanceSQL
	// Unhold deletes the hold of an instance by a token.
	Unhold ScheduleUnholdSQL
	// Members lists the live instances of a schedule and their runners.
	Members ScheduleMembersSQL
	// Claim writes the row of a moment unless one exists. One affected row
	// means this insert won.
	Claim ScheduleClaimSQL
	// Last reads the latest moment of a schedule whose row was written
	// before a time: where a schedule that catches up counts from.
	Last ScheduleLastSQL
	// TakeDealt claims the shares of a moment dealt to an instance that
	// nobody claimed yet. It returns each share's place.
	TakeDealt ScheduleTakeDealtSQL
	// Orphans lists the shares whose lease ended at or before now and
	// after now less the heartbeat TTL: schedule, moment, worker.
	Orphans ScheduleOrphansSQL
	// Unfinished lists, by moment and worker, the shares of a schedule from
	// a moment on that are not done and whose lease ended: what a catch-up
	// takes over, however long ago their lease ended.
	Unfinished ScheduleUnfinishedSQL
	// TakeOver claims a share if its lease still ended at or before now and
	// it is not done. It returns the share's place.
	TakeOver ScheduleTakeOverSQL
	// Renew extends the lease of a share held with a token.
	Renew ScheduleRenewSQL
	// Finish marks a share held with a token done, with its error. Its
	// lease becomes DoneLease, which no sweep looks at; the row stays for
	// operators until PruneShares.
	Finish ScheduleFinishSQL
	// Release hands a share held with a token back: its lease ends now, and
	// the next sweep of a live instance takes it.
	Release ScheduleReleaseSQL
	// Skip deletes the shares of a moment dealt to an instance that nobody
	// claimed: that instance skips the moment.
	Skip ScheduleSkipSQL
	// PruneMoments deletes the moments fired and written before now plus
	// an offset, but never a schedule's latest: a schedule that catches up
	// counts from it. PruneBeats deletes heartbeats and PruneHolds instance
	// holds that expired before now plus an offset.
	PruneMoments, PruneBeats, PruneHolds SchedulePruneSQL
	// PruneShares deletes the shares of moments before a time whose lease
	// ended before now plus an offset (a done share's lease is DoneLease):
	// a share of an old moment caught up late lives while it runs.
	PruneShares SchedulePruneSharesSQL
}

// DoneLease is the lease written into a share that ran: before any
// sweep's window (the last HeartbeatTTL), so that no instance, of this
// version or of one that still deleted done shares, takes it over.
var DoneLease = time.Unix(0, 0).UTC()

// shareCols are the columns of a share's place, in the order TakeDealt and
// TakeOver return them.
const shareCols = `worker, workers, dealt_to, instance_index, instances, runner, runners`

// Schedule returns the schedule statements for times kept as t says.
func (d *Dialect) Schedule(t Times) ScheduleSQL {
	hb, mo, sh, in := d.Quote(ScheduleHeartbeats), d.Quote(ScheduleMoments), d.Quote(ScheduleShares), d.Quote(ScheduleInstances)
	// The placeholders are the order of each statement's Call.
	x := func(sql string) text { return d.text(sql, t) }
	s := ScheduleSQL{
		Beat: ScheduleBeatSQL{x(`INSERT INTO ` + hb + ` (schedule, instance, runners, expires_at, spec, placement, next_at, runs, failures, last_error, last_error_at)
VALUES ($1, $2, $3, ` + t.At(4) + `, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (schedule, instance) DO UPDATE SET runners = excluded.runners, expires_at = excluded.expires_at,
spec = excluded.spec, placement = excluded.placement, next_at = excluded.next_at, runs = excluded.runs,
failures = excluded.failures, last_error = excluded.last_error, last_error_at = excluded.last_error_at`)},
		Hold: ScheduleHoldSQL{x(`INSERT INTO ` + in + ` (instance, token, expires_at) VALUES ($1, $2, ` + t.At(3) + `)
ON CONFLICT (instance) DO UPDATE SET token = excluded.token, expires_at = excluded.expires_at
WHERE ` + in + `.token = excluded.token OR ` + in + `.expires_at <= ` + t.At(4))},
		HoldUntil: ScheduleInstanceSQL{x(`SELECT expires_at FROM ` + in + ` WHERE instance = $1`)},
		Leave:     ScheduleInstanceSQL{x(`DELETE FROM ` + hb + ` WHERE instance = $1`)},
		Unhold:    ScheduleUnholdSQL{x(`DELETE FROM ` + in + ` WHERE instance = $1 AND token = $2`)},
		Members:   ScheduleMembersSQL{x(`SELECT instance, runners FROM ` + hb + ` WHERE schedule = $1 AND expires_at > ` + t.At(2))},
		Claim: ScheduleClaimSQL{x(`INSERT INTO ` + mo + ` (schedule, fired_at, writer, members, created_at) VALUES ($1, $2, $3, $4, ` + t.At(5) + `)
ON CONFLICT (schedule, fired_at) DO NOTHING`)},
		Last: ScheduleLastSQL{x(`SELECT MAX(fired_at) FROM ` + mo + ` WHERE schedule = $1 AND created_at < ` + t.At(2))},
		TakeDealt: ScheduleTakeDealtSQL{text: x(`UPDATE ` + sh + ` SET holder = $1, token = $2, locked_until = ` + t.At(3) + `
WHERE schedule = $4 AND moment = $5 AND dealt_to = $1 AND holder IS NULL RETURNING ` + shareCols)},
		Orphans: ScheduleOrphansSQL{x(`SELECT schedule, moment, worker FROM ` + sh + ` WHERE locked_until <= ` + t.At(1) + ` AND locked_until > ` + t.At(2))},
		Unfinished: ScheduleUnfinishedSQL{x(`SELECT moment, worker FROM ` + sh + ` WHERE schedule = $1 AND moment >= $2 AND done_at IS NULL
AND locked_until <= ` + t.At(3) + ` ORDER BY moment, worker LIMIT $4`)},
		TakeOver: ScheduleTakeOverSQL{text: x(`UPDATE ` + sh + ` SET holder = $1, token = $2, locked_until = ` + t.At(3) + `
WHERE schedule = $4 AND moment = $5 AND worker = $6 AND locked_until <= ` + t.At(7) + ` AND done_at IS NULL RETURNING ` + shareCols)},
		Renew: ScheduleRenewSQL{x(`UPDATE ` + sh + ` SET locked_until = ` + t.At(1) + ` WHERE schedule = $2 AND moment = $3 AND worker = $4 AND token = $5`)},
		Finish: ScheduleFinishSQL{x(`UPDATE ` + sh + ` SET done_at = ` + t.At(1) + `, error = $2, token = NULL, locked_until = $7
WHERE schedule = $3 AND moment = $4 AND worker = $5 AND token = $6`)},
		Release: ScheduleReleaseSQL{x(`UPDATE ` + sh + ` SET locked_until = ` + t.At(1) + `, token = NULL WHERE schedule = $2 AND moment = $3 AND worker = $4 AND token = $5`)},
		Skip:    ScheduleSkipSQL{x(`DELETE FROM ` + sh + ` WHERE schedule = $1 AND moment = $2 AND dealt_to = $3 AND holder IS NULL`)},
		PruneMoments: SchedulePruneSQL{x(`DELETE FROM ` + mo + ` WHERE fired_at < ` + t.At(1) + ` AND created_at < ` + t.At(1) + `
AND EXISTS (SELECT 1 FROM ` + mo + ` later WHERE later.schedule = ` + mo + `.schedule AND later.fired_at > ` + mo + `.fired_at)`)},
		PruneShares: SchedulePruneSharesSQL{x(`DELETE FROM ` + sh + ` WHERE moment < $1 AND locked_until < ` + t.At(2))},
		PruneBeats:  SchedulePruneSQL{x(`DELETE FROM ` + hb + ` WHERE expires_at < ` + t.At(1))},
		PruneHolds:  SchedulePruneSQL{x(`DELETE FROM ` + in + ` WHERE expires_at < ` + t.At(1))},
	}
	if d.Kind == MySQL {
		d.mysqlSchedule(&s, t)
	}
	return s
}

// DealShares is the insert of n shares of one moment, each with ten
// parameters in this order: schedule, moment, worker, workers, dealt_to,
// instance_index, instances, runner, runners, and the reservation's end
// (Times.Arg(now, lease)), until which only dealt_to claims it.
func (d *Dialect) DealShares(t Times, n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO ` + d.Quote(ScheduleShares) + ` (schedule, moment, ` + shareCols + `, locked_until) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		p := i * 10
		fmt.Fprintf(&b, "($%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, $%d, %s)",
			p+1, p+2, p+3, p+4, p+5, p+6, p+7, p+8, p+9, t.At(p+10))
	}
	return d.Rebind(b.String())
}
