package claim_test

import (
	"context"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// Subscriptions draining one backlog of a table with a block sequence each
// claim from blocks of their own: they meet in few blocks (the first, which
// all start from, and the last, as the backlog runs out), where on the same
// table without the sequence their claims share nearly every block. Every
// row is still handled once.
func TestClaimBlocksKeepClaimersApart(t *testing.T) {
	with := drainApart(t, true)
	without := drainApart(t, false)
	t.Logf("blocks shared by two or more subscriptions: %d of %d with the block sequence, %d of %d without",
		with.shared, with.touched, without.shared, without.touched)
	if with.shared*3 > with.touched {
		t.Errorf("with the block sequence %d of %d blocks were claimed from by two or more subscriptions, want at most a third", with.shared, with.touched)
	}
	if without.shared < 2*with.shared {
		t.Errorf("without the block sequence %d blocks were shared, with it %d: the sequence kept claimers no further apart", without.shared, with.shared)
	}
	if !with.ticketed || without.ticketed {
		t.Errorf("block sequence used: %v with it, %v without; want true, false", with.ticketed, without.ticketed)
	}
}

type apart struct {
	shared, touched int
	ticketed        bool
}

func drainApart(t *testing.T, blocks bool) apart {
	s := suite{form: lease.Form, kind: postgres, noBlocks: !blocks}
	f := s.setup(t)
	const subs, workers, total = 3, 8, 24 * dialect.BlockIDs
	if _, err := f.db.Exec(fmt.Sprintf("INSERT INTO %s (id, payload) SELECT g, 'p' FROM generate_series(0, %d) AS g", dialect.Quote(f.table), total-1)); err != nil {
		t.Fatal(err)
	}
	h := newHandlings()
	var mu sync.Mutex
	owners := map[int64]uint8{} // block -> the subscriptions that took rows from it
	var acked atomic.Int64
	all := make(chan struct{})
	observe := inbox.Observe(func(e inbox.Event) {
		if e.Outcome == inbox.Acked && acked.Add(1) == total {
			close(all)
		}
	})
	for i := range subs {
		// No rescan during the drain: what is measured is where the
		// claims of a backlog go.
		b := f.broker(t, f.url, inbox.MaxConns(workers+2), inbox.PollInterval(time.Minute))
		sub, err := inbox.Subscribe(b, f.queue, func(ctx context.Context, j Job) error {
			start := h.start(j.ID)
			defer h.end(j.ID, start)
			mu.Lock()
			owners[j.ID/dialect.BlockIDs] |= 1 << i
			mu.Unlock()
			return nil
		}, inbox.Form(s.form), inbox.Workers(workers), observe)
		if err != nil {
			t.Fatal(err)
		}
		stop := inboxtest.RunSubscription(t, sub)
		defer stop()
	}
	select {
	case <-all:
	case <-time.After(3 * time.Minute):
		t.Fatalf("%d of %d rows acked after 3 minutes", acked.Load(), total)
	}
	h.check(t)
	if n := f.count(t); n != 0 {
		t.Errorf("%d rows left in the table", n)
	}
	var a apart
	for _, set := range owners {
		a.touched++
		if bits.OnesCount8(set) > 1 {
			a.shared++
		}
	}
	if blocks {
		a.ticketed = f.ticketed(t)
	}
	return a
}

// A row that becomes available behind the block a claimer drains (here one
// held for a year, made available again as an operator unparks it) is
// taken within a rescan or two, not when the backlog has run out.
func TestClaimBlocksFindRowsBehind(t *testing.T) {
	s := suite{form: lease.Form, kind: postgres}
	f := s.setup(t)
	const workers, total = 8, 24 * dialect.BlockIDs
	if _, err := f.db.Exec(fmt.Sprintf("INSERT INTO %s (id, payload) SELECT g, 'p' FROM generate_series(1, %d) AS g", dialect.Quote(f.table), total)); err != nil {
		t.Fatal(err)
	}
	const behind = 10
	if _, err := f.db.Exec(fmt.Sprintf("UPDATE %s SET locked_until = now() + interval '1 year' WHERE id = %d", dialect.Quote(f.table), behind)); err != nil {
		t.Fatal(err)
	}
	var acked atomic.Int64
	started, found := make(chan struct{}), make(chan int64, 1)
	b := f.broker(t, f.url, inbox.MaxConns(workers+2), inbox.PollInterval(50*time.Millisecond))
	sub, err := inbox.Subscribe(b, f.queue, func(ctx context.Context, j Job) error {
		if j.ID == behind {
			found <- acked.Load()
		}
		return nil
	}, inbox.Form(s.form), inbox.Workers(workers), inbox.Observe(func(e inbox.Event) {
		if e.Outcome == inbox.Acked && acked.Add(1) == 2*dialect.BlockIDs-1 {
			close(started)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub)
	<-started
	if !f.ticketed(t) {
		t.Fatal("two blocks of rows acked and no block taken from the sequence")
	}
	if _, err := f.db.Exec(fmt.Sprintf("UPDATE %s SET locked_until = NULL WHERE id = %d", dialect.Quote(f.table), behind)); err != nil {
		t.Fatal(err)
	}
	freed := acked.Load()
	var at int64
	select {
	case at = <-found:
	case <-time.After(time.Minute):
		t.Fatalf("the row behind the block was not handled in a minute (%d of %d acked)", acked.Load(), total)
	}
	t.Logf("the row behind the block was handled %d acks after it was freed, %d rows before the backlog ran out", at-freed, total-at)
	if total-at < 4*dialect.BlockIDs {
		t.Errorf("the row behind the block was handled with %d rows left of %d, want it found while the backlog lasts", total-at, total)
	}
}
