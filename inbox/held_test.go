package inbox_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// heldForm is a form like row lock: one row a claim, and a connection held
// for each job until its settlement ends, which waits for its gate.
type heldForm struct{ c *heldClaimer }

func (heldForm) Name() string                    { return "held-test" }
func (heldForm) Supports(*dialect.Dialect) error { return nil }
func (f heldForm) New(env claim.Env) (claim.Claimer, error) {
	f.c.conns.Store(int64(env.Conns))
	return f.c, nil
}

type heldClaimer struct {
	held, next, conns atomic.Int64
	settling          chan int64 // an ack's id once it waits for its gate
	mu                sync.Mutex
	gates             map[int64]chan struct{}
}

func (c *heldClaimer) Traits() claim.Traits {
	return claim.Traits{RowsPerClaim: 1, PinsConnection: true}
}
func (c *heldClaimer) Held() int { return int(c.held.Load()) }

func (c *heldClaimer) gate(id int64) chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.gates[id]
	if g == nil {
		g = make(chan struct{})
		c.gates[id] = g
	}
	return g
}

// open lets every settlement through, now and later.
func (c *heldClaimer) open() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := int64(1); id <= c.next.Load()+64; id++ {
		g := c.gates[id]
		if g == nil {
			g = make(chan struct{})
			c.gates[id] = g
		}
		select {
		case <-g:
		default:
			close(g)
		}
	}
}

func (c *heldClaimer) Claim(ctx context.Context, max int) ([]*claim.Job, error) {
	c.held.Add(1)
	id := c.next.Add(1)
	return []*claim.Job{{ID: id, Value: &Job{ID: id}, Settler: &heldSettler{c: c, id: id}}}, nil
}

type heldSettler struct {
	c  *heldClaimer
	id int64
}

func (s *heldSettler) Ack(ctx context.Context) error {
	s.c.settling <- s.id
	<-s.c.gate(s.id)
	s.c.held.Add(-1)
	return nil
}
func (s *heldSettler) Retry(context.Context, time.Duration, string) error { return s.Ack(nil) }
func (s *heldSettler) Park(context.Context, string) error                 { return s.Ack(nil) }
func (s *heldSettler) Release(context.Context) error                      { s.c.held.Add(-1); return nil }
func (s *heldSettler) Snooze(context.Context, time.Duration) error        { return s.Ack(nil) }
func (s *heldSettler) Extend(context.Context, time.Duration) error        { return nil }

// In a form that holds a connection a job, the end of a settlement frees a
// connection: a loop that stopped claiming at the pool's limit, with every
// worker's handler returned, claims again at once, not at the next poll
// (an hour here) nor when the other settlements end.
func TestSettlementFreeingAConnectionWakesTheLoop(t *testing.T) {
	b := open(t, inboxtest.SQLite(t), inbox.PollInterval(time.Hour))
	c := &heldClaimer{gates: map[int64]chan struct{}{}, settling: make(chan int64, 64)}
	started := make(chan int64, 64)
	sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(ctx context.Context, j Job) error {
		started <- j.ID
		return nil
	}, inbox.Workers(4), inbox.Form(heldForm{c}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	defer func() {
		cancel()
		c.open()
		<-done
	}()
	wait := func(ch chan int64, n int, what string) { t.Helper(); receiveN(t, ch, n, what) }
	wait(started, 1, "the first handler started")
	conns := int(c.conns.Load()) // known once the form is made
	if conns < 2 || conns >= 4 {
		t.Fatalf("the form may hold %d connections; the test needs 2 or 3, fewer than its 4 workers", conns)
	}
	wait(started, conns-1, "handlers started, one a connection")
	wait(c.settling, conns, "settlements waiting, every connection held")
	close(c.gate(1)) // one settlement ends: its connection is free
	wait(started, 1, "a handler started on the connection freed (the poll is an hour away)")
}
