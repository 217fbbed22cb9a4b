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

// ScheduleSQL is the text of every statement the schedule package runs,
// written once for both engines and rebound for one. Times go through the
// Times it was made with, so a fake clock reaches them and a database clock
// reads the engine's now(). A share's moment is kept as Unix milliseconds.
type ScheduleSQL struct {
	// Beat upserts a heartbeat: $1 schedule, $2 instance, $3 runners,
	// $4 expiry (Times.Arg(now, ttl)), and what operators read: $5 spec,
	// $6 placement, $7 next moment (Times.Encode, or nil), $8 runs and
	// $9 failures since the instance started, $10 the last failure's error
	// and $11 its time (Times.Encode; both nil without one).
	Beat string
	// Hold takes or renews instance name $1 for token $2 until $3
	// (Times.Arg(now, ttl)) unless another token holds it past $4 (now).
	// No affected row: another live scheduler has the name.
	Hold string
	// HoldUntil reads when the hold on instance name $1 expires.
	HoldUntil string
	// Leave deletes every heartbeat of instance $1.
	Leave string
	// Unhold deletes the hold of instance $1 by token $2.
	Unhold string
	// Members lists the live instances of schedule $1 and their runners:
	// $2 is now (Times.Arg(now, 0)).
	Members string
	// Claim writes the row of a moment unless one exists: $1 schedule,
	// $2 fired_at (Times.Encode), $3 writer, $4 membership (JSON text).
	// One affected row means this insert won.
	Claim string
	// TakeDealt claims the shares of moment $5 of schedule $4 dealt to
	// instance $1 that nobody claimed yet: holder $1, token $2, lease $3.
	// It returns each share's place.
	TakeDealt string
	// Orphans lists the shares whose lease ended at or before $1 (now) and
	// after $2 (now less the heartbeat TTL): schedule, moment, worker.
	Orphans string
	// TakeOver claims share ($4 schedule, $5 moment, $6 worker) if its lease
	// still ended at or before $7 (now) and it is not done: holder $1,
	// token $2, lease $3. It returns the share's place.
	TakeOver string
	// Renew extends the lease of share ($2, $3, $4) held with token $5 to $1.
	Renew string
	// Finish marks share ($3, $4, $5) held with token $6 done at $1
	// (Times.Arg(now, 0)) with error $2 (nil when it succeeded). Its lease
	// becomes $7 (Times.Encode(DoneLease)), which no sweep looks at; the
	// row stays for operators until PruneShares.
	Finish string
	// Release hands share ($2, $3, $4) held with token $5 back: its lease
	// ends at $1 (now), and the next sweep of a live instance takes it.
	Release string
	// Skip deletes the shares of moment $2 of schedule $1 dealt to $3 that
	// nobody claimed: that instance skips the moment.
	Skip string
	// PruneMoments deletes moments older than $1 (Times.Arg(now, -retention)).
	PruneMoments string
	// PruneShares deletes shares of moments before $1 (Unix milliseconds).
	PruneShares string
	// PruneBeats deletes heartbeats that expired before $1 (Times.Arg(now, -retention)).
	PruneBeats string
	// PruneHolds deletes instance holds that expired before $1.
	PruneHolds string
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
	hb, mo, sh, in := Quote(ScheduleHeartbeats), Quote(ScheduleMoments), Quote(ScheduleShares), Quote(ScheduleInstances)
	return ScheduleSQL{
		Beat: d.Rebind(`INSERT INTO ` + hb + ` (schedule, instance, runners, expires_at, spec, placement, next_at, runs, failures, last_error, last_error_at)
VALUES ($1, $2, $3, ` + t.At(4) + `, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (schedule, instance) DO UPDATE SET runners = excluded.runners, expires_at = excluded.expires_at,
spec = excluded.spec, placement = excluded.placement, next_at = excluded.next_at, runs = excluded.runs,
failures = excluded.failures, last_error = excluded.last_error, last_error_at = excluded.last_error_at`),
		Hold: d.Rebind(`INSERT INTO ` + in + ` (instance, token, expires_at) VALUES ($1, $2, ` + t.At(3) + `)
ON CONFLICT (instance) DO UPDATE SET token = excluded.token, expires_at = excluded.expires_at
WHERE ` + in + `.token = excluded.token OR ` + in + `.expires_at <= ` + t.At(4)),
		HoldUntil: d.Rebind(`SELECT expires_at FROM ` + in + ` WHERE instance = $1`),
		Leave:     d.Rebind(`DELETE FROM ` + hb + ` WHERE instance = $1`),
		Unhold:    d.Rebind(`DELETE FROM ` + in + ` WHERE instance = $1 AND token = $2`),
		Members:   d.Rebind(`SELECT instance, runners FROM ` + hb + ` WHERE schedule = $1 AND expires_at > ` + t.At(2)),
		Claim:     d.Rebind(`INSERT INTO ` + mo + ` (schedule, fired_at, writer, members) VALUES ($1, $2, $3, $4) ON CONFLICT (schedule, fired_at) DO NOTHING`),
		TakeDealt: d.Rebind(`UPDATE ` + sh + ` SET holder = $1, token = $2, locked_until = ` + t.At(3) + `
WHERE schedule = $4 AND moment = $5 AND dealt_to = $1 AND holder IS NULL RETURNING ` + shareCols),
		Orphans: d.Rebind(`SELECT schedule, moment, worker FROM ` + sh + ` WHERE locked_until <= ` + t.At(1) + ` AND locked_until > ` + t.At(2)),
		TakeOver: d.Rebind(`UPDATE ` + sh + ` SET holder = $1, token = $2, locked_until = ` + t.At(3) + `
WHERE schedule = $4 AND moment = $5 AND worker = $6 AND locked_until <= ` + t.At(7) + ` AND done_at IS NULL RETURNING ` + shareCols),
		Renew: d.Rebind(`UPDATE ` + sh + ` SET locked_until = ` + t.At(1) + ` WHERE schedule = $2 AND moment = $3 AND worker = $4 AND token = $5`),
		Finish: d.Rebind(`UPDATE ` + sh + ` SET done_at = ` + t.At(1) + `, error = $2, token = NULL, locked_until = $7
WHERE schedule = $3 AND moment = $4 AND worker = $5 AND token = $6`),
		Release:      d.Rebind(`UPDATE ` + sh + ` SET locked_until = ` + t.At(1) + `, token = NULL WHERE schedule = $2 AND moment = $3 AND worker = $4 AND token = $5`),
		Skip:         d.Rebind(`DELETE FROM ` + sh + ` WHERE schedule = $1 AND moment = $2 AND dealt_to = $3 AND holder IS NULL`),
		PruneMoments: d.Rebind(`DELETE FROM ` + mo + ` WHERE fired_at < ` + t.At(1)),
		PruneShares:  d.Rebind(`DELETE FROM ` + sh + ` WHERE moment < $1`),
		PruneBeats:   d.Rebind(`DELETE FROM ` + hb + ` WHERE expires_at < ` + t.At(1)),
		PruneHolds:   d.Rebind(`DELETE FROM ` + in + ` WHERE expires_at < ` + t.At(1)),
	}
}

// DealShares is the insert of n shares of one moment, each with ten
// parameters in this order: schedule, moment, worker, workers, dealt_to,
// instance_index, instances, runner, runners, and the reservation's end
// (Times.Arg(now, lease)), until which only dealt_to claims it.
func (d *Dialect) DealShares(t Times, n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO ` + Quote(ScheduleShares) + ` (schedule, moment, ` + shareCols + `, locked_until) VALUES `)
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
