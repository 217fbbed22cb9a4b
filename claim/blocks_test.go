package claim_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/bits"
	"strings"
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
	if !with.ticketed {
		t.Error("the claims took no block from the table's block sequence")
	}
}

type apart struct {
	shared, touched int
	ticketed        bool
}

func drainApart(t *testing.T, blocks bool) apart {
	const subs, workers, total = 3, 8, 24 * dialect.BlockIDs
	s := suite{form: lease.Form, kind: postgres, noBlocks: !blocks}
	f := s.backlog(t, 0, total)
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
	const workers, total = 8, 24 * dialect.BlockIDs
	s := suite{form: lease.Form, kind: postgres}
	f := s.backlog(t, 1, total)
	const behind = 10
	if _, err := f.db.Exec(fmt.Sprintf("UPDATE %s SET locked_until = now() + interval '1 year' WHERE id = %d", dialect.Quote(f.table), behind)); err != nil {
		t.Fatal(err)
	}
	var acked atomic.Int64
	var behindHandled atomic.Int32
	started, found := make(chan struct{}), make(chan int64, 1)
	b := f.broker(t, f.url, inbox.MaxConns(workers+2), inbox.PollInterval(50*time.Millisecond))
	sub, err := inbox.Subscribe(b, f.queue, func(ctx context.Context, j Job) error {
		if j.ID == behind && behindHandled.Add(1) == 1 {
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
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatalf("%d of %d rows acked after a minute", acked.Load(), 2*dialect.BlockIDs-1)
	}
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
	if n := behindHandled.Load(); n != 1 {
		t.Errorf("the row behind the block was handled %d times", n)
	}
	t.Logf("the row behind the block was handled %d acks after it was freed", at-freed)
	tookEarly(t, "the row behind the block", at, total)
}

// A claimer that stops leaves the rest of its block to the others: they
// find it behind their own blocks at each rescan and take it a few claims
// a rescan, well before the backlog runs out.
func TestClaimBlocksTakeAStoppedClaimersBlock(t *testing.T) {
	const workers, total = 8, 24 * dialect.BlockIDs
	s := suite{form: lease.Form, kind: postgres}
	f := s.backlog(t, 0, total)
	var mu sync.Mutex
	acked := int64(0)
	perBlock := map[int64]int{} // rows acked in each block
	watched, blockDone, blockDoneAt := int64(-1), make(chan struct{}), int64(0)
	done := func(block int64) bool { return perBlock[block] == dialect.BlockIDs }
	observe := inbox.Observe(func(e inbox.Event) {
		if e.Outcome != inbox.Acked {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		acked++
		perBlock[e.ID/dialect.BlockIDs]++
		if watched >= 0 && e.ID/dialect.BlockIDs == watched && done(watched) {
			blockDoneAt = acked
			close(blockDone)
		}
	})
	subscribe := func(name string, handle func(context.Context, Job) error) func() {
		// Rescans at a pace that takes the rest of a block (160 rows a
		// rescan) well before one claimer of 8 no-op workers drains 24k rows.
		b := f.broker(t, f.url, inbox.MaxConns(workers+2), inbox.PollInterval(50*time.Millisecond))
		sub, err := inbox.Subscribe(b, f.queue, func(ctx context.Context, j Job) error {
			return handle(ctx, j)
		}, inbox.Form(s.form), inbox.Workers(workers), inbox.Name(name), observe)
		if err != nil {
			t.Fatal(err)
		}
		return inboxtest.RunSubscription(t, sub)
	}
	// A stops a tenth of the way into a block past the first (which every
	// claimer starts from), so most of that block is left when it stops.
	// From that row on each of its handlers takes 5 ms (or until the stop):
	// on a fast machine it drained the block before the stop landed. B
	// starts once A has stopped.
	var once sync.Once
	midBlock, halted := make(chan int64, 1), make(chan struct{})
	stopA := subscribe("a", func(ctx context.Context, j Job) error {
		if j.ID >= dialect.BlockIDs && j.ID%dialect.BlockIDs == dialect.BlockIDs/10 {
			once.Do(func() { midBlock <- j.ID / dialect.BlockIDs; close(halted) })
		}
		select {
		case <-halted:
			select {
			case <-time.After(5 * time.Millisecond):
			case <-ctx.Done():
			}
		default:
		}
		return nil
	})
	var block int64
	select {
	case block = <-midBlock:
	case <-time.After(time.Minute):
		t.Fatal("a handled no row a tenth of the way into a block in a minute")
	}
	stopA()
	// B starts once A has stopped, so the rest of A's block is A's to leave.
	subscribe("b", func(context.Context, Job) error { return nil })
	mu.Lock()
	watched = block
	left := dialect.BlockIDs - perBlock[block]
	finished := done(block)
	at := acked
	mu.Unlock()
	if finished {
		t.Fatalf("a stopped with its block %d drained (%d rows acked in all): nothing was left to take", block, at)
	}
	select {
	case <-blockDone:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the rest of the stopped claimer's block %d not acked after 3 minutes", block)
	}
	mu.Lock()
	at = blockDoneAt
	mu.Unlock()
	t.Logf("a stopped with %d rows of its block %d left", left, block)
	tookEarly(t, "the rest of the stopped claimer's block", at, total)
}

// tookEarly fails the test unless what was taken, at acks of total, with
// four blocks of rows or more still to go: while the backlog lasted.
func tookEarly(t *testing.T, what string, at, total int64) {
	t.Helper()
	t.Logf("%s was taken with %d of %d rows still to ack", what, total-at, total)
	if total-at < 4*dialect.BlockIDs {
		t.Errorf("%s was taken with %d rows left of %d, want it taken while the backlog lasts", what, total-at, total)
	}
}

// A ticket that fails (here the sequence is dropped while claims take
// blocks) turns the blocks off: the backlog drains on without them, and
// no claim fails.
func TestClaimBlocksGoOnWithoutTheSequence(t *testing.T) {
	const workers, total = 8, 16 * dialect.BlockIDs
	s := suite{form: lease.Form, kind: postgres}
	f := s.backlog(t, 0, total)
	var acked atomic.Int64
	twoBlocks, all := make(chan struct{}), make(chan struct{})
	var logged syncBuffer
	b := f.broker(t, f.url, inbox.MaxConns(workers+2), inbox.WithLogger(slog.New(slog.NewTextHandler(&logged, nil))))
	sub, err := inbox.Subscribe(b, f.queue, func(context.Context, Job) error { return nil },
		inbox.Form(s.form), inbox.Workers(workers), inbox.Observe(func(e inbox.Event) {
			if e.Outcome != inbox.Acked {
				return
			}
			switch acked.Add(1) {
			case 2 * dialect.BlockIDs:
				close(twoBlocks)
			case total:
				close(all)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.RunSubscription(t, sub)
	select {
	case <-twoBlocks:
	case <-time.After(time.Minute):
		t.Fatal("two blocks of rows not acked after a minute")
	}
	if !f.ticketed(t) {
		t.Fatal("two blocks of rows acked and no block taken from the sequence")
	}
	if _, err := f.db.Exec("DROP SEQUENCE " + dialect.BlockSequenceName(f.table)); err != nil {
		t.Fatal(err)
	}
	dropped := time.Now()
	select {
	case <-all:
	case <-time.After(time.Minute):
		t.Fatalf("%d of %d rows acked a minute after the sequence was dropped", acked.Load(), total)
	}
	t.Logf("the last %d rows drained in %v after the sequence was dropped", total-2*dialect.BlockIDs, time.Since(dropped).Round(time.Millisecond))
	if out := logged.String(); strings.Contains(out, "claim failed") {
		t.Errorf("claims failed after the sequence was dropped:\n%s", out)
	}
}

// syncBuffer is a bytes.Buffer a logger may write from several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// backlog is a fresh table of the suite's (on Postgres, with its block
// sequence unless the suite drops it) holding n rows, ids first on.
func (s suite) backlog(t *testing.T, first, n int) *fixture {
	t.Helper()
	f := s.setup(t)
	q := fmt.Sprintf("INSERT INTO %s (id, payload) SELECT g, 'p' FROM generate_series(%d, %d) AS g", dialect.Quote(f.table), first, first+n-1)
	if _, err := f.db.Exec(q); err != nil {
		t.Fatal(err)
	}
	return f
}

// Claims go on without blocks where blocks would not keep claimers apart:
// rows whose ids are sparser than half a block a claim (each block would
// hold a claim or less), and a subscription of one group (its rows lie
// among the other groups'). Both drain their backlog; neither takes a
// block from the sequence.
func TestClaimBlocksLeftAloneWhereTheyWouldNotHelp(t *testing.T) {
	const workers, rows = 8, 2000
	type groupJob struct {
		ID          int64      `db:"id" inbox:"id,generated"`
		LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
		Group       string     `db:"group_name" inbox:"group"`
		Payload     []byte     `db:"payload" inbox:"payload"`
	}
	for _, c := range []struct {
		name   string
		insert string // %s the table, %d the rows
		sub    func(b *inbox.Broker, table string, opts ...inbox.SubOption) (*inbox.Subscription, error)
	}{
		{"sparse ids", "INSERT INTO %s (id, payload) SELECT g * 1000, 'p' FROM generate_series(0, %d - 1) AS g",
			func(b *inbox.Broker, table string, opts ...inbox.SubOption) (*inbox.Subscription, error) {
				return inbox.Subscribe(b, inbox.MustQueue[Job](table), func(context.Context, Job) error { return nil }, opts...)
			}},
		{"one group", "INSERT INTO %s (group_name, payload) SELECT 'g', 'p' FROM generate_series(1, %d)",
			func(b *inbox.Broker, table string, opts ...inbox.SubOption) (*inbox.Subscription, error) {
				return inbox.Subscribe(b, inbox.MustQueue[groupJob](table).Group("g"), func(context.Context, groupJob) error { return nil }, opts...)
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := suite{form: lease.Form, kind: postgres}
			f := s.setup(t)
			if _, err := f.db.Exec(fmt.Sprintf(c.insert, dialect.Quote(f.table), rows)); err != nil {
				t.Fatal(err)
			}
			var acked atomic.Int64
			all := make(chan struct{})
			b := f.broker(t, f.url, inbox.MaxConns(workers+2))
			sub, err := c.sub(b, f.table, inbox.Form(s.form), inbox.Workers(workers), inbox.Observe(func(e inbox.Event) {
				if e.Outcome == inbox.Acked && acked.Add(1) == rows {
					close(all)
				}
			}))
			if err != nil {
				t.Fatal(err)
			}
			inboxtest.RunSubscription(t, sub)
			select {
			case <-all:
			case <-time.After(time.Minute):
				t.Fatalf("%d of %d rows acked after a minute", acked.Load(), rows)
			}
			if f.ticketed(t) {
				t.Errorf("%s: the claims took a block from the sequence", c.name)
			}
		})
	}
}
