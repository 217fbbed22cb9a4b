package inboxtest

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx/reflectx"

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

// columns are the columns of a queue's row type, by role: the kit reads
// the same `db` and `inbox` tags the library does.
type columns struct {
	id, lockedUntil, group, attempts, lastError string
	idIndex                                     []int
}

var mapper = reflectx.NewMapperFunc("db", func(s string) string { return s })

func columnsOf(t reflect.Type) (columns, error) {
	var c columns
	if t.Kind() != reflect.Struct {
		return c, fmt.Errorf("inboxtest: a queue's row type must be a struct, got %v", t)
	}
	for _, fi := range mapper.TypeMap(t).Index {
		col := fi.Field.Tag.Get("db")
		role, _, _ := strings.Cut(fi.Field.Tag.Get("inbox"), ",")
		if col == "" || col == "-" || fi.Field.Anonymous {
			continue
		}
		switch inbox.Role(strings.TrimSpace(role)) {
		case inbox.RoleID:
			c.id, c.idIndex = col, fi.Index
		case inbox.RoleLockedUntil:
			c.lockedUntil = col
		case inbox.RoleGroup:
			c.group = col
		case inbox.RoleAttempts:
			c.attempts = col
		case inbox.RoleLastError:
			c.lastError = col
		}
	}
	if c.id == "" || c.lockedUntil == "" {
		return c, fmt.Errorf("inboxtest: %v tags no id or no locked_until column", t)
	}
	return c, nil
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
	c, err := columnsOf(reflect.TypeFor[T]())
	if err != nil {
		return nil, err
	}
	d, err := dialect.Detect(b.DB())
	if err != nil {
		return nil, err
	}
	cols := []string{dialect.Quote(c.id), dialect.Quote(c.lockedUntil)}
	for _, col := range []string{c.group, c.attempts, c.lastError} {
		if col == "" {
			col = "NULL"
		} else {
			col = dialect.Quote(col)
		}
		cols = append(cols, col)
	}
	query := fmt.Sprintf("SELECT %s FROM %s", strings.Join(cols, ", "), dialect.Quote(q.Table()))
	var args []any
	if q.GroupName() != "" {
		if c.group == "" {
			return nil, fmt.Errorf("inboxtest: queue %q has group %q but its row type tags no group column", q.Table(), q.GroupName())
		}
		query += " WHERE " + dialect.Quote(c.group) + " = $1"
		args = append(args, q.GroupName())
	}
	query += " ORDER BY " + dialect.Quote(c.id)
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	rs, err := b.DB().QueryContext(ctx, d.Rebind(query), args...)
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
		switch {
		case !ok || !at.After(now):
			r.State = Available
		case !at.Before(dialect.Never):
			r.State = Parked
		default:
			r.State = Locked
		}
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
