package inbox

import (
	"fmt"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// Rate caps the handlings that start per window per of rows with the same
// value in column at n, across every instance and in every claim form: a
// claim passes over the rows of a value that started n handlings in the
// last per, so they stay available, use no attempt and are not retried or
// parked; the subscription wakes when the value's oldest start in the
// window is per old and claims its next row then, without waiting for a
// poll. Rows whose column is NULL are not limited.
//
// The algorithm is a sliding window log: a handling takes a slot, a row of
// the table sqlinbox_limit_slots (create it with migrations.ApplyLimits),
// when its row is claimed, and the slot lasts per from then whether the
// handling ends sooner or later; the table's primary key caps the slots of
// a value at n. So the slots taken of one value in any window of length per
// are at most n, exactly, as read on one clock. The error bound on the
// handler starts: the clocks of the instances (their skew; none with
// WithClock(clock.Database)), plus the time from a slot's take to its
// handler's start (the rest of its claim's statements and the hand-off to a
// worker, as a limited subscription keeps no claimed rows waiting; 32 ms at
// p50 and up to 900 ms across a connection loss in BENCHMARKS.md). So the
// starts of one value in any window of per minus that error are at most n. A claimed row given back unstarted
// (at a stop) still used its slot: a rate errs towards fewer starts.
//
// In the lease form on SQLite and Postgres a claim takes no more rows of a
// value than its window has slots left; elsewhere it may take more and
// give them back unstarted. Rows that a claim took and gave back (or
// because another claimer took the value's last slot first) are counted in
// Stats().LimitRefused, as a limit's are. Operator.Limits shows a rate's slots as a limit's: Held is
// the starts in the last window (Expired: older ones the next claim
// frees). The rate is named after the table and column
// ("table:column:rate"); SharedRate names one that several tables share.
// Run checks that the column exists. With a Limit too (of the same column
// or another), a row is claimed only when both allow: it takes the limit's
// slot, then the rate's; a row that another claimer beat to its rate's
// slot is given back with its limit's slot freed. Bound: a column name, n
// at least 1, per at least a millisecond; not with FairBy (Subscribe
// refuses the two together), nor under the name of the subscription's
// SharedLimit.
func Rate(column string, n int, per time.Duration) SubOption {
	return SharedRate("", column, n, per)
}

// SharedRate is Rate under a name of its own: subscriptions (of any tables)
// that give the same name, column values alike, the same n and the same per
// share its slots, so at most n handlings of one value start per window
// among all of them. Do not give a rate the name of a Limit. Bound: name of
// 1 to 200 letters, digits and _ . : / - ("" names it after the table and
// column, as Rate does).
func SharedRate(name, column string, n int, per time.Duration) SubOption {
	return func(c *subConfig) error {
		call := fmt.Sprintf("Rate(%q, %d, %v)", column, n, per)
		switch {
		case column == "":
			return fmt.Errorf("inbox: %w: %s: name the key column", ErrInvalid, call)
		case n < 1:
			return fmt.Errorf("inbox: %w: %s: give at least 1 start per window per value", ErrInvalid, call)
		case per < time.Millisecond:
			return fmt.Errorf("inbox: %w: %s: give a window of at least 1ms", ErrInvalid, call)
		}
		if name != "" {
			if err := dialect.ValidLimitName(name); err != nil {
				return fmt.Errorf("inbox: %w: SharedRate(%q, %q, %d, %v): %v", ErrInvalid, name, column, n, per, err)
			}
		}
		c.rate = &limitConfig{name: name, column: column, max: n, per: per}
		return nil
	}
}

// Rate returns the subscription's rate per key: its column, n and window,
// zero values without one.
func (s *Subscription) Rate() (column string, n int, per time.Duration) {
	if l := s.cfg.rate; l != nil {
		return l.column, l.max, l.per
	}
	return "", 0, 0
}
