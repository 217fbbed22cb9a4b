package inboxtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// State is where a row stands, read from its locked_until alone.
type State string

// The states of a row.
const (
	Available State = "available" // locked_until NULL, or at or before now
	Locked    State = "locked"    // claimed under a lease, or delayed (a retry, a delayed publish)
	Parked    State = "parked"    // failed its last attempt; set aside until unparked
)

// Row is a row still in a queue's table, as a test sees it.
type Row struct {
	ID          int64
	Group       string    // "" when the table has no group column
	LockedUntil time.Time // zero when NULL
	State       State     // at the moment of reading, on the broker's clock
	Attempts    int       // 0 when the table does not count them
	LastError   string    // "" when none, or the table keeps none
}

func (r Row) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "id %d", r.ID)
	if r.Group != "" {
		fmt.Fprintf(&b, " (group %q)", r.Group)
	}
	switch r.State {
	case Locked:
		fmt.Fprintf(&b, ": locked until %s", r.LockedUntil.Format(time.RFC3339Nano))
	default:
		fmt.Fprintf(&b, ": %s", r.State)
	}
	fmt.Fprintf(&b, ", attempts %d", r.Attempts)
	if r.LastError != "" {
		fmt.Fprintf(&b, ", last error %q", r.LastError)
	}
	return b.String()
}

// Rows reads the rows still in q's table (its group, when q has one), in id
// order, with their lease state on b's clock (the fake one of NewBroker or
// UseClock, otherwise the host's). b is any broker on the database.
func Rows[T any](t testing.TB, b *inbox.Broker, q inbox.Queue[T]) []Row {
	t.Helper()
	rows, err := readRows(b, q)
	if err != nil {
		t.Fatalf("inboxtest: %v", err)
	}
	return rows
}

// ParkedRows is the rows of q that are parked.
func ParkedRows[T any](t testing.TB, b *inbox.Broker, q inbox.Queue[T]) []Row {
	t.Helper()
	var out []Row
	for _, r := range Rows(t, b, q) {
		if r.State == Parked {
			out = append(out, r)
		}
	}
	return out
}

func readRows[T any](b *inbox.Broker, q inbox.Queue[T]) ([]Row, error) {
	roles := q.Roles()
	if roles == nil {
		return nil, fmt.Errorf("inboxtest: zero Queue: make it with inbox.NewQueue")
	}
	if q.GroupName() != "" && roles[inbox.RoleGroup] == "" {
		return nil, fmt.Errorf("inboxtest: queue %q has group %q but its row type tags no group column", q.Table(), q.GroupName())
	}
	d, err := dialect.Detect(b.DB())
	if err != nil {
		return nil, err
	}
	quote := func(r inbox.Role) string {
		if roles[r] == "" {
			return ""
		}
		return d.Quote(roles[r])
	}
	query := d.QueueRows(dialect.Table{Name: d.Quote(q.Table()), ID: quote(inbox.RoleID), LockedUntil: quote(inbox.RoleLockedUntil),
		Group: quote(inbox.RoleGroup), Attempts: quote(inbox.RoleAttempts), LastError: quote(inbox.RoleLastError)}).Call(q.GroupName())
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	rs, err := b.DB().QueryContext(ctx, query.SQL, query.Args...)
	if err != nil {
		return nil, fmt.Errorf("read the rows of %q: %w", q.Table(), err)
	}
	defer rs.Close()
	now := time.Now()
	if fc := ClockOf(b); fc != nil {
		now = fc.Now()
	}
	// Decode takes integer milliseconds and every text layout alike.
	times := dialect.Times{Kind: d.Kind, Encoding: dialect.EncodingFor(d.Kind, "")}
	var out []Row
	for rs.Next() {
		var (
			r         Row
			locked    any
			group     *string
			attempts  *int64
			lastError *string
		)
		if err := rs.Scan(&r.ID, &locked, &group, &attempts, &lastError); err != nil {
			return nil, fmt.Errorf("read the rows of %q: %w", q.Table(), err)
		}
		at, ok, err := times.Decode(locked)
		if err != nil {
			return nil, fmt.Errorf("read the rows of %q: id %d: %w", q.Table(), r.ID, err)
		}
		r.State = stateOf(at, ok, now)
		if ok {
			r.LockedUntil = at
		}
		if group != nil {
			r.Group = *group
		}
		if attempts != nil {
			r.Attempts = int(*attempts)
		}
		if lastError != nil {
			r.LastError = *lastError
		}
		out = append(out, r)
	}
	return out, rs.Err()
}

// stateOf is the library's state of a row (dialect.StateOf), a row held
// and one delayed alike being Locked.
func stateOf(lu time.Time, set bool, now time.Time) State {
	switch dialect.StateOf(lu, set, now, now) {
	case dialect.StateAvailable:
		return Available
	case dialect.StateParked:
		return Parked
	}
	return Locked
}

// WaitRows waits until cond holds over q's rows, reading them every few
// milliseconds, and fails the test after Timeout, naming what it waited
// for and listing the rows left.
func WaitRows[T any](t testing.TB, b *inbox.Broker, q inbox.Queue[T], what string, cond func([]Row) bool) []Row {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		rows, err := readRows(b, q)
		if err != nil {
			t.Fatalf("inboxtest: %v", err)
		}
		if cond(rows) {
			return rows
		}
		if time.Now().After(deadline) {
			t.Fatalf("inboxtest: waited %v for %s on %s; %s", Timeout, what, queueName(q), describeRows(rows))
		}
		<-tick.C
	}
}

// WaitDrained waits until q's table (its group, when q has one) holds no
// row, and fails the test after Timeout listing the rows left, with their
// lease state, attempts and last errors. On a fake clock rows that wait for a
// retry or a delay drain only when the test advances the clock.
func WaitDrained[T any](t testing.TB, b *inbox.Broker, q inbox.Queue[T]) {
	t.Helper()
	WaitRows(t, b, q, "the queue to drain", func(rows []Row) bool { return len(rows) == 0 })
}

func queueName[T any](q inbox.Queue[T]) string {
	if q.GroupName() != "" {
		return fmt.Sprintf("%q group %q", q.Table(), q.GroupName())
	}
	return fmt.Sprintf("%q", q.Table())
}

// describeRows lists rows for a failure message, the first 20 in full.
func describeRows(rows []Row) string {
	if len(rows) == 0 {
		return "no rows left"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d rows left:", len(rows))
	for i, r := range rows {
		if i == 20 {
			fmt.Fprintf(&b, "\n\t... and %d more", len(rows)-20)
			break
		}
		b.WriteString("\n\t" + r.String())
	}
	return b.String()
}
