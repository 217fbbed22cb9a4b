package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// On Postgres a release never waits on a row lock another transaction
// holds on a child: that row is a claim's or another release's, and a
// row-lock handler holding it may wait for the release's connection (two
// row-lock subscriptions past the pool stalled so). The child is released
// by the sweep once the lock is gone.
func TestDepsReleasePassesALockedChild(t *testing.T) {
	t.Parallel()
	url := inboxtest.Postgres(t)
	b := open(t, url, inbox.PollInterval(50*time.Millisecond))
	table := depsTable(t, b)
	q := inbox.MustQueue[Job](table).Group("rows")
	done := q.Group("done")
	p := publishP(t, b, q, "parent")
	c := publishP(t, b, done, "child", inbox.After(p))
	side, err := inbox.OpenDB(url)
	if err != nil {
		t.Fatal(err)
	}
	defer side.Close()
	tx, err := side.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var locked int64
	if err := tx.QueryRow(fmt.Sprintf("SELECT id FROM %s WHERE id = %d FOR UPDATE", table, c)).Scan(&locked); err != nil {
		t.Fatal(err)
	}
	evs := inboxtest.NewEvents(t)
	sub, err := inbox.Subscribe(b, q, func(context.Context, Job) error { return nil }, inbox.Form(rowlock.Form), evs.Observe())
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub)
	// Before, the ack waited on the lock for the release's 30 s.
	start := time.Now()
	evs.WaitFor(15*time.Second, "the parent's ack while its child is locked", func(all []inbox.Event) bool {
		return inboxtest.Count(all, inbox.Acked) == 1
	})
	t.Logf("parent acked in %v with its child locked", time.Since(start))
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	ran := make(chan int64, 1)
	onDone, err := inbox.Subscribe(b, done, func(ctx context.Context, j Job) error { ran <- j.ID; return nil }, inbox.Form(rowlock.Form))
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, onDone)
	select {
	case id := <-ran:
		if id != c {
			t.Fatalf("ran row %d, want the child %d", id, c)
		}
	case <-time.After(inboxtest.Timeout):
		t.Fatal("the child was never released")
	}
}

// Row-lock subscriptions of one broker whose workers together far exceed
// its pool (6 + 3 + 4 on a pool of 4), with handlers that take a
// connection of their own while their row holds one: batches release
// their callbacks, plain rows are acked, retried and parked, and every row
// settles. Postgres: on MariaDB a release may still wait on a claimed row.
func TestRowLockSubscriptionsPastThePool(t *testing.T) {
	t.Parallel()
	url := inboxtest.Postgres(t)
	const batches, size, plain = 30, 5, 60
	b := open(t, url, inbox.MaxConns(4), inbox.PollInterval(100*time.Millisecond))
	ctx := context.Background()
	table := depsTable(t, b)
	q := inbox.MustQueue[Job](table).Group("rows")
	done := q.Group("done")
	other := inbox.MustQueue[Job](ownTable(t, b))
	for i := range batches {
		rows := make([]Job, size)
		for j := range rows {
			rows[j].Payload = []byte(fmt.Sprintf("b%d-%d", i, j))
			if (i+j)%4 == 0 {
				rows[j].Payload = append(rows[j].Payload, "-fail"...)
			}
		}
		if _, err := inbox.PublishBatch(ctx, b, q, rows, done, Job{Payload: []byte(fmt.Sprint("cb", i))}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range plain {
		p := fmt.Sprint("p", i)
		switch {
		case i%7 == 0:
			p += "-fail"
		case i%5 == 0:
			p += "-once"
		}
		publishP(t, b, other, p)
	}
	var mu sync.Mutex
	tries := map[string]int{}
	handle := func(ctx context.Context, j Job) error {
		var one int
		if err := b.DB().QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
			return err
		}
		p := string(j.Payload)
		mu.Lock()
		tries[p]++
		n := tries[p]
		mu.Unlock()
		if strings.HasSuffix(p, "-fail") || strings.HasSuffix(p, "-once") && n == 1 {
			return errors.New("this row fails")
		}
		return nil
	}
	quick := inbox.Backoff(func(int) time.Duration { return 20 * time.Millisecond })
	rowsEvs, cbEvs, plainEvs := inboxtest.NewEvents(t), inboxtest.NewEvents(t), inboxtest.NewEvents(t)
	for _, s := range []struct {
		q       inbox.Queue[Job]
		workers int
		opts    []inbox.SubOption
	}{
		{q, 6, []inbox.SubOption{inbox.MaxAttempts(1), rowsEvs.Observe()}},
		{done, 3, []inbox.SubOption{cbEvs.Observe()}},
		{other, 4, []inbox.SubOption{inbox.MaxAttempts(2), quick, plainEvs.Observe()}},
	} {
		sub, err := inbox.Subscribe(b, s.q, handle, append(s.opts, inbox.Form(rowlock.Form), inbox.Workers(s.workers))...)
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
	}
	start := time.Now()
	settled := func(n int) func([]inbox.Event) bool {
		return func(all []inbox.Event) bool {
			return inboxtest.Count(all, inbox.Acked)+inboxtest.Count(all, inbox.Parked) >= n
		}
	}
	// Generous: a stall is the 30 s of a release's timeout, again and again.
	const limit = 90 * time.Second
	rowsEvs.WaitFor(limit, "the batches' rows settled", settled(batches*size))
	cbEvs.WaitFor(limit, "every callback", settled(batches))
	all := plainEvs.WaitFor(limit, "the plain rows settled", settled(plain))
	t.Logf("%d batches of %d and %d plain rows settled in %v on a pool of 4", batches, size, plain, time.Since(start))
	if n, want := inboxtest.Count(all, inbox.Parked), (plain+6)/7; n != want {
		t.Errorf("%d plain rows parked, want %d", n, want)
	}
	if n := inboxtest.Count(all, inbox.Retried); n == 0 {
		t.Error("no plain row was retried")
	}
	if n := inboxtest.Count(cbEvs.All(), inbox.Acked); n != batches {
		t.Errorf("%d callbacks acked, want %d", n, batches)
	}
}
