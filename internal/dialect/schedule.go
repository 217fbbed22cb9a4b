package dialect

// The schedule package's tables, created by migrations.ApplySchedules.
const (
	// ScheduleHeartbeats holds one row per (schedule, instance): the
	// instance's runners for the schedule and when its heartbeat expires.
	ScheduleHeartbeats = "sqlinbox_schedule_heartbeats"
	// ScheduleMoments holds one row per (schedule, fired_at): the instance
	// that wrote it first and the membership it saw.
	ScheduleMoments = "sqlinbox_schedule_moments"
)

// ScheduleSQL is the text of every statement the schedule package runs,
// written once for both engines and rebound for one. Times go through the
// Times it was made with, so a fake clock reaches them and a database clock
// reads the engine's now().
type ScheduleSQL struct {
	// Beat upserts a heartbeat: $1 schedule, $2 instance, $3 runners,
	// $4 expiry (Times.Arg(now, ttl)).
	Beat string
	// Leave deletes every heartbeat of instance $1.
	Leave string
	// Members lists the live instances of schedule $1 and their runners:
	// $2 is now (Times.Arg(now, 0)).
	Members string
	// Claim writes the row of a moment unless one exists: $1 schedule,
	// $2 fired_at (Times.Encode), $3 writer, $4 membership (JSON text).
	// One affected row means this insert won.
	Claim string
	// Moment reads the row of a moment: $1 schedule, $2 fired_at; it
	// returns writer and membership.
	Moment string
	// PruneMoments deletes moments older than $1 (Times.Arg(now, -retention)).
	PruneMoments string
	// PruneBeats deletes heartbeats that expired before $1 (Times.Arg(now, -retention)).
	PruneBeats string
}

// Schedule returns the schedule statements for times kept as t says.
func (d *Dialect) Schedule(t Times) ScheduleSQL {
	hb, mo := Quote(ScheduleHeartbeats), Quote(ScheduleMoments)
	return ScheduleSQL{
		Beat: d.Rebind(`INSERT INTO ` + hb + ` (schedule, instance, runners, expires_at) VALUES ($1, $2, $3, ` + t.At(4) + `)
ON CONFLICT (schedule, instance) DO UPDATE SET runners = excluded.runners, expires_at = excluded.expires_at`),
		Leave:        d.Rebind(`DELETE FROM ` + hb + ` WHERE instance = $1`),
		Members:      d.Rebind(`SELECT instance, runners FROM ` + hb + ` WHERE schedule = $1 AND expires_at > ` + t.At(2)),
		Claim:        d.Rebind(`INSERT INTO ` + mo + ` (schedule, fired_at, writer, members) VALUES ($1, $2, $3, $4) ON CONFLICT (schedule, fired_at) DO NOTHING`),
		Moment:       d.Rebind(`SELECT writer, members FROM ` + mo + ` WHERE schedule = $1 AND fired_at = $2`),
		PruneMoments: d.Rebind(`DELETE FROM ` + mo + ` WHERE fired_at < ` + t.At(1)),
		PruneBeats:   d.Rebind(`DELETE FROM ` + hb + ` WHERE expires_at < ` + t.At(1)),
	}
}
