package dialect

import "time"

// The schedule package's statements, each a type whose Call takes its
// parameters by name and type (see Call). Times of the clock (expiries,
// leases, now) go through Times.Arg, so a database clock reads the engine's
// now(); times kept as columns through Times.Encode; a share's moment as
// Unix milliseconds.

// ScheduleBeatSQL upserts a heartbeat (see ScheduleSQL.Beat).
type ScheduleBeatSQL struct{ text }

// Call writes the heartbeat of instance for schedule: its runners, expiring
// ttl from now; and for operators the schedule's spec and placement, its
// next moment (zero: none), the runs and failures since the instance
// started, and the last failure's error and time (zero time: none).
func (s ScheduleBeatSQL) Call(schedule, instance string, runners int, now time.Time, ttl time.Duration,
	spec, placement string, next time.Time, runs, failures int64, lastErr string, lastErrAt time.Time) Call {
	var nextArg, errArg, errAtArg any
	if !next.IsZero() {
		nextArg = s.tm.Encode(next)
	}
	if !lastErrAt.IsZero() {
		errArg, errAtArg = lastErr, s.tm.Encode(lastErrAt)
	}
	return s.call(schedule, instance, runners, s.tm.Arg(now, ttl), spec, placement, nextArg, runs, failures, errArg, errAtArg)
}

// ScheduleHoldSQL takes or renews an instance name (see ScheduleSQL.Hold).
type ScheduleHoldSQL struct{ text }

// Call holds instance for token until now+ttl, unless another token holds
// it past now.
func (s ScheduleHoldSQL) Call(instance, token string, now time.Time, ttl time.Duration) Call {
	return s.call(instance, token, s.tm.Arg(now, ttl), s.tm.Arg(now, 0))
}

// ScheduleInstanceSQL reads or deletes what belongs to an instance
// (HoldUntil, Leave).
type ScheduleInstanceSQL struct{ text }

// Call acts on instance.
func (s ScheduleInstanceSQL) Call(instance string) Call { return s.call(instance) }

// ScheduleUnholdSQL deletes an instance's hold (see ScheduleSQL.Unhold).
type ScheduleUnholdSQL struct{ text }

// Call deletes the hold of instance by token.
func (s ScheduleUnholdSQL) Call(instance, token string) Call { return s.call(instance, token) }

// ScheduleMembersSQL lists a schedule's live instances.
type ScheduleMembersSQL struct{ text }

// Call lists the instances of schedule live at now.
func (s ScheduleMembersSQL) Call(schedule string, now time.Time) Call {
	return s.call(schedule, s.tm.Arg(now, 0))
}

// ScheduleClaimSQL writes the row of a moment (see ScheduleSQL.Claim).
type ScheduleClaimSQL struct{ text }

// Call writes moment firedAt of schedule, by writer at now, with the
// membership it saw as JSON.
func (s ScheduleClaimSQL) Call(schedule string, firedAt time.Time, writer, membersJSON string, now time.Time) Call {
	return s.call(schedule, s.tm.Encode(firedAt), writer, membersJSON, s.tm.Arg(now, 0))
}

// ScheduleLastSQL reads a schedule's latest moment (see ScheduleSQL.Last).
type ScheduleLastSQL struct{ text }

// Call reads the latest moment of schedule whose row was written before
// before; it is NULL when there is none.
func (s ScheduleLastSQL) Call(schedule string, before time.Time) Call {
	return s.call(schedule, s.tm.Arg(before, 0))
}

// ScheduleTakeDealtSQL claims the shares dealt to an instance.
type ScheduleTakeDealtSQL struct {
	text
	read text // where the claim returns nothing (MySQL): the read of what it claimed
}

// Returns says the claim returns the shares it claimed; where it does not
// (MySQL), Read reads them once it ran.
func (s ScheduleTakeDealtSQL) Returns() bool { return s.read.sql == "" }

// Read reads the shares a Call with token claimed of moment firedAt of
// schedule (see Returns).
func (s ScheduleTakeDealtSQL) Read(token, schedule string, firedAt time.Time) Call {
	return s.read.call(token, schedule, firedAt.UnixMilli())
}

// Call claims for holder, with token, until now+lease, the unclaimed shares
// of moment firedAt of schedule dealt to holder.
func (s ScheduleTakeDealtSQL) Call(holder, token string, now time.Time, lease time.Duration, schedule string, firedAt time.Time) Call {
	return s.call(holder, token, s.tm.Arg(now, lease), schedule, firedAt.UnixMilli())
}

// ScheduleOrphansSQL lists the shares whose lease ended.
type ScheduleOrphansSQL struct{ text }

// Call lists the shares whose lease ended at or before now and after
// now-ttl.
func (s ScheduleOrphansSQL) Call(now time.Time, ttl time.Duration) Call {
	return s.call(s.tm.Arg(now, 0), s.tm.Arg(now, -ttl))
}

// ScheduleUnfinishedSQL lists a schedule's shares not done whose lease
// ended (see ScheduleSQL.Unfinished).
type ScheduleUnfinishedSQL struct{ text }

// Call lists at most limit shares of schedule, of moments at or after from,
// not done, whose lease ended at or before now.
func (s ScheduleUnfinishedSQL) Call(schedule string, from, now time.Time, limit int) Call {
	return s.call(schedule, from.UnixMilli(), s.tm.Arg(now, 0), limit)
}

// ScheduleTakeOverSQL claims a share whose lease ended.
type ScheduleTakeOverSQL struct {
	text
	read text // as ScheduleTakeDealtSQL's
}

// Returns says the claim returns the share it claimed; where it does not
// (MySQL), Read reads it once it ran.
func (s ScheduleTakeOverSQL) Returns() bool { return s.read.sql == "" }

// Read reads share worker of moment firedAt of schedule if a Call with
// token claimed it (see Returns).
func (s ScheduleTakeOverSQL) Read(token, schedule string, firedAt time.Time, worker int) Call {
	return s.read.call(token, schedule, firedAt.UnixMilli(), worker)
}

// Call claims for holder, with token, until now+lease, share worker of
// moment firedAt of schedule, if its lease still ended at or before now.
func (s ScheduleTakeOverSQL) Call(holder, token string, now time.Time, lease time.Duration, schedule string, firedAt time.Time, worker int) Call {
	return s.call(holder, token, s.tm.Arg(now, lease), schedule, firedAt.UnixMilli(), worker, s.tm.Arg(now, 0))
}

// ScheduleRenewSQL extends a held share's lease.
type ScheduleRenewSQL struct{ text }

// Call extends to now+lease the lease of share worker of moment firedAt of
// schedule, held with token.
func (s ScheduleRenewSQL) Call(now time.Time, lease time.Duration, schedule string, firedAt time.Time, worker int, token string) Call {
	return s.call(s.tm.Arg(now, lease), schedule, firedAt.UnixMilli(), worker, token)
}

// ScheduleFinishSQL marks a share done (see ScheduleSQL.Finish).
type ScheduleFinishSQL struct{ text }

// Call marks share worker of moment firedAt of schedule, held with token,
// done at now; when failed, with errText (else the error is NULL).
func (s ScheduleFinishSQL) Call(now time.Time, failed bool, errText, schedule string, firedAt time.Time, worker int, token string) Call {
	var e any
	if failed {
		e = errText
	}
	return s.call(s.tm.Arg(now, 0), e, schedule, firedAt.UnixMilli(), worker, token, s.tm.Encode(DoneLease))
}

// ScheduleReleaseSQL hands a share back (see ScheduleSQL.Release).
type ScheduleReleaseSQL struct{ text }

// Call ends at now the lease of share worker of moment firedAt of
// schedule, held with token.
func (s ScheduleReleaseSQL) Call(now time.Time, schedule string, firedAt time.Time, worker int, token string) Call {
	return s.call(s.tm.Arg(now, 0), schedule, firedAt.UnixMilli(), worker, token)
}

// ScheduleSkipSQL deletes the unclaimed shares dealt to an instance.
type ScheduleSkipSQL struct{ text }

// Call deletes the unclaimed shares of moment firedAt of schedule dealt to
// instance.
func (s ScheduleSkipSQL) Call(schedule string, firedAt time.Time, instance string) Call {
	return s.call(schedule, firedAt.UnixMilli(), instance)
}

// SchedulePruneSQL deletes rows older than a time (the Prune statements).
type SchedulePruneSQL struct{ text }

// Call deletes the rows from before now+offset (offset is negative).
func (s SchedulePruneSQL) Call(now time.Time, offset time.Duration) Call {
	return s.call(s.tm.Arg(now, offset))
}

// SchedulePruneSharesSQL deletes the shares of old moments.
type SchedulePruneSharesSQL struct{ text }

// Call deletes the shares of moments before now+offset whose lease ended
// before then (offset is negative).
func (s SchedulePruneSharesSQL) Call(now time.Time, offset time.Duration) Call {
	return s.call(now.Add(offset).UnixMilli(), s.tm.Arg(now, offset))
}
