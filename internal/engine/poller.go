package engine

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
)

// Poller polls for the idle group subscriptions of one table on one broker.
// A group subscription whose claim came back short parks with it instead of
// arming a poll of its own; once a poll interval the poller asks, in one
// statement, which of the parked groups have a row available now, and wakes
// only the subscriptions of those groups, which claim as before until a
// claim comes back short again. So 1000 idle groups cost one statement a
// poll interval, not 1000 (and no claim goroutine each), and a row that
// becomes available in any group is still seen within a poll interval.
// Publishes and notifications wake a subscription as before; that ends its
// parking.
//
// The poller runs a goroutine only while some subscription is parked.
type Poller struct {
	cfg PollerConfig

	mu      sync.Mutex
	parked  map[string][]*parking // by group
	n       int
	running bool
	timer   clock.Timer
	quit    chan struct{} // closed when the running goroutine is to end
	due     time.Time     // when the next poll fires; zero when none is armed
	moved   chan struct{} // closed when due moves (for Idle.Wait)
	polls   int
	lastErr string
}

// PollerConfig is what a Poller needs of its broker and table.
type PollerConfig struct {
	Table string // for logs
	Every time.Duration
	Clock clock.Clock
	Log   *slog.Logger
	// Find returns the groups, of those given, that have a row available
	// now, each probed from its floor (math.MinInt64 for the table's
	// start).
	Find func(ctx context.Context, groups []string, floors []int64) ([]string, error)
}

// Floorer is a Claimer whose claims after a short one start at a floor
// (see claim.Mark): the poller probes a group from there, so an idle poll
// does not walk the index entries of rows deleted below it.
type Floorer interface {
	Floor() int64
}

// parking is one subscription's place with the poller.
type parking struct {
	group  string
	floor  func() int64
	due    chan struct{} // signalled when the poller finds the group has a row
	idle   *Idle         // told at once that the loop is woken (see poll)
	parked bool          // guarded by the poller's mu
}

// NewPoller returns an idle poller; it starts nothing until a subscription
// parks.
func NewPoller(cfg PollerConfig) *Poller {
	return &Poller{cfg: cfg, parked: map[string][]*parking{}, moved: make(chan struct{})}
}

// floorOf is where c's claims start after a short one.
func floorOf(c contract.Claimer) func() int64 {
	if f, ok := c.(Floorer); ok {
		return f.Floor
	}
	return func() int64 { return math.MinInt64 }
}

// park registers k until the poller wakes it or unpark. The first parking
// arms the poll at once, so a fake clock moved after the subscription
// reports idle fires it.
func (p *Poller) park(k *parking) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k.parked {
		return
	}
	k.parked = true
	p.parked[k.group] = append(p.parked[k.group], k)
	p.n++
	if !p.running {
		p.running = true
		p.quit = make(chan struct{})
		p.arm()
		go p.run(p.timer, p.quit)
	}
}

// unpark takes k back; the last one parked ends the goroutine.
func (p *Poller) unpark(k *parking) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !k.parked {
		return
	}
	k.parked = false
	ks := p.parked[k.group]
	for i, o := range ks {
		if o == k {
			ks = append(ks[:i], ks[i+1:]...)
			break
		}
	}
	if len(ks) == 0 {
		delete(p.parked, k.group)
	} else {
		p.parked[k.group] = ks
	}
	p.n--
	if p.n == 0 && p.running {
		p.running = false
		p.timer.Stop()
		close(p.quit)
		p.setDue(time.Time{})
	}
}

// arm arms the next poll an interval from now (mu held).
func (p *Poller) arm() {
	p.timer = p.cfg.Clock.NewTimer(p.cfg.Every)
	p.setDue(p.cfg.Clock.Now().Add(p.cfg.Every))
}

func (p *Poller) setDue(t time.Time) {
	p.due = t
	close(p.moved)
	p.moved = make(chan struct{})
}

// next is when the next poll fires (zero when none is armed), and a
// channel closed when that changes.
func (p *Poller) next() (time.Time, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.due, p.moved
}

// run polls once an interval while some subscription is parked.
func (p *Poller) run(t clock.Timer, quit chan struct{}) {
	for {
		select {
		case <-quit:
			return
		case <-t.C():
		}
		p.poll()
		p.mu.Lock()
		select {
		case <-quit:
			p.mu.Unlock()
			return
		default:
		}
		p.arm()
		t = p.timer
		p.mu.Unlock()
	}
}

// pollTimeout bounds one poll's statement.
const pollTimeout = 30 * time.Second

// poll asks which parked groups have a row and wakes their subscriptions.
// Every contract.DeepRescans polls it probes from the table's start, as the
// subscriptions' own floor reads would: a row committed below a floor is
// found then. A failed poll wakes every parked subscription: each then
// claims on its own (and backs off on its own while claims fail), as
// without a poller.
func (p *Poller) poll() {
	p.mu.Lock()
	p.polls++
	deep := p.polls%contract.DeepRescans == 0
	groups := make([]string, 0, len(p.parked))
	floors := make([]int64, 0, len(p.parked))
	for g, ks := range p.parked {
		f := int64(math.MaxInt64)
		for _, k := range ks {
			f = min(f, k.floor())
		}
		if deep {
			f = math.MinInt64
		}
		groups, floors = append(groups, g), append(floors, f)
	}
	p.mu.Unlock()
	if len(groups) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	found, err := p.cfg.Find(ctx, groups, floors)
	cancel()
	p.mu.Lock()
	if err != nil {
		if msg := err.Error(); msg != p.lastErr {
			p.cfg.Log.Error("inbox: idle poll failed; every idle group subscription claims on its own meanwhile", "table", p.cfg.Table, "err", err)
			p.lastErr = msg
		}
		found = groups
	} else if p.lastErr != "" {
		p.cfg.Log.Info("inbox: idle polls work again", "table", p.cfg.Table)
		p.lastErr = ""
	}
	var woken []*parking
	for _, g := range found {
		for _, k := range p.parked[g] {
			k.parked = false
			p.n--
			woken = append(woken, k)
		}
		delete(p.parked, g)
	}
	if p.n == 0 && p.running {
		p.running = false
		close(p.quit)
		p.setDue(time.Time{})
	}
	p.mu.Unlock()
	// Each woken loop's idle state is told before the next poll is armed:
	// a WaitIdle that sees the next poll's time must not find the loop
	// idle between its taking the wake and its next report.
	for _, k := range woken {
		if k.idle != nil {
			k.idle.woken()
		}
		signal(k.due)
	}
}
