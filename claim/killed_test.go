package claim_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/claim/advisory"
	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
)

// killedHolder kills the holder of a row while its handler runs: the row
// comes back (at once for the lock forms, after the lease for lease) and
// is handled once more; the dead holder's ack changes nothing.
func (s suite) killedHolder(t *testing.T) {
	f := s.setup(t)
	const leaseFor = 10 * time.Second
	id := f.insert(t, 1)[0]

	victimURL, victimApp := f.url, ""
	var victimOpts, survivorOpts []inbox.Option
	var moving *clock.Fake
	if s.form == lease.Form {
		// The victim's clock never moves: it never extends its lease, as a
		// dead process would not; the survivor's clock runs past the lease.
		moving = clock.NewFake(epoch)
		victimOpts = []inbox.Option{inbox.WithClock(clock.NewFake(epoch))}
		survivorOpts = []inbox.Option{inbox.WithClock(moving), inbox.PollInterval(time.Second)}
	} else {
		victimApp = "victim_" + random()
		if s.kind == postgres {
			victimURL = withParam(t, f.url, "application_name", victimApp)
		}
		survivorOpts = []inbox.Option{inbox.PollInterval(50 * time.Millisecond)}
	}

	started, release := make(chan struct{}), make(chan struct{})
	victimEv := inboxtest.NewEvents(t)
	vb := f.broker(t, victimURL, append(victimOpts, inbox.MaxConns(3))...)
	victim, err := inbox.Subscribe(vb, f.queue, func(ctx context.Context, j Job) error {
		close(started)
		<-release
		return nil
	}, s.with(inbox.Form(s.form), inbox.Lease(leaseFor), victimEv.Observe(), inbox.Name("victim"))...)
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, victim)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the victim did not take the row within 30s")
	}
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	survivorEv := inboxtest.NewEvents(t)
	sb := f.broker(t, f.url, append(survivorOpts, inbox.MaxConns(3))...)
	var survivorSaw atomic.Int64
	survivor, err := inbox.Subscribe(sb, f.queue, func(ctx context.Context, j Job) error { survivorSaw.Store(int64(j.Attempts)); return nil },
		s.with(inbox.Form(s.form), inbox.Lease(leaseFor), survivorEv.Observe(), inbox.Name("survivor"))...)
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, survivor)
	inboxtest.Idle(t, survivor) // it claimed and found the row held
	if evs := survivorEv.All(); len(evs) != 0 {
		t.Fatalf("the survivor handled a row the victim holds: %+v", evs)
	}

	killed := time.Now()
	switch s.form {
	case lease.Form:
		moving.Advance(leaseFor + time.Second)
	case rowlock.Form:
		// The session holding the row's transaction open.
		if onMySQL(s.kind) {
			if n := killTxHolders(t, f.db); n != 1 {
				t.Fatalf("killed %d sessions holding a transaction, want the victim's", n)
			}
			break
		}
		terminate(t, f.db, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE application_name = $1 AND state LIKE 'idle in transaction%'`, victimApp)
	case advisory.Form:
		// The session holding the row's advisory lock.
		if s.kind == mysql {
			if n := killUserLockHolders(t, f.db, f.table, id); n != 1 {
				t.Fatalf("killed %d sessions holding the row's lock, want the victim's", n)
			}
			break
		}
		terminate(t, f.db, `SELECT pg_terminate_backend(pid) FROM pg_locks
			WHERE locktype = 'advisory' AND classid = $1::int::oid AND objid = $2::bigint::oid AND objsubid = 2 AND granted`,
			advisory.Class(f.table), id)
	}
	survivorEv.WaitFor(30*time.Second, "the survivor to ack the row of the killed holder", func(evs []inbox.Event) bool {
		return len(evs) > 0
	})
	if s.form != lease.Form {
		if elapsed := time.Since(killed); elapsed > leaseFor {
			t.Errorf("the row came back %v after its holder died; the %s form frees it at once", elapsed, s.form.Name())
		}
	}
	close(release)
	vevs := victimEv.WaitFor(30*time.Second, "the victim's outcome", func(evs []inbox.Event) bool { return len(evs) > 0 })
	if len(vevs) != 1 || vevs[0].ID != id || vevs[0].Outcome != inbox.Lost {
		t.Errorf("the killed holder's handling: %+v, want one Lost outcome for row %d", vevs, id)
	}
	sevs := survivorEv.All()
	if len(sevs) != 1 || sevs[0].ID != id || sevs[0].Outcome != inbox.Acked {
		t.Errorf("the survivor's handlings: %+v, want row %d acked once", sevs, id)
	}
	// The victim's claim counted its attempt though it never settled.
	if n := survivorSaw.Load(); n != 2 || sevs[0].Attempt != 2 {
		t.Errorf("the survivor's handling saw attempts %d, event attempt %d; want 2 (the dead holder's claim counts)", n, sevs[0].Attempt)
	}
	if n := f.count(t); n != 0 {
		t.Errorf("%d rows left, want none", n)
	}
	if s.form == advisory.Form {
		if n := f.advisoryLocks(t); n != 0 {
			t.Errorf("%d advisory locks of the table's class held, want none", n)
		}
	}
}

// terminate ends the sessions query names and fails unless it ended one.
// killTxHolders kills, on MariaDB/MySQL, every session of the test's
// database that holds an InnoDB transaction open (KILL CONNECTION), and
// says how many it killed.
func killTxHolders(t *testing.T, db *sql.DB) int {
	t.Helper()
	var ids []int64
	for _, x := range testdb.Transactions(t, db) {
		ids = append(ids, x.Conn)
	}
	for _, id := range ids {
		if _, err := db.Exec(fmt.Sprintf("KILL CONNECTION %d", id)); err != nil {
			t.Fatal(err)
		}
	}
	return len(ids)
}

func terminate(t *testing.T, db *sql.DB, query string, args ...any) {
	t.Helper()
	rows, err := db.Query(query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var ok bool
		if err := rows.Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if ok {
			n++
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("terminated %d sessions holding the row, want 1", n)
	}
}

func withParam(t *testing.T, raw, k, v string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}
