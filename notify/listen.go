package notify

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// Listener carries Postgres notifications into a Hub: it keeps one
// connection of a pool for its whole life, LISTENs on every channel asked of
// it, and wakes the hub's waiters of a notification's channel and payload.
// A lost connection is reconnected with backoff; once back it wakes every
// waiter of its channels, since what was notified in the gap is gone.
type Listener struct {
	db  *sql.DB
	hub *Hub
	log *slog.Logger

	mu       sync.Mutex
	channels map[string]bool          // channel -> LISTEN issued on the current connection
	first    map[string]chan struct{} // channel -> closed once first listened to
	added    chan struct{}            // a channel was added: LISTEN it
	ready    chan struct{}            // closed and replaced each time every channel is listened to
	pid      atomic.Uint32
}

// ListenerBackoff bounds the wait between reconnections.
const (
	ListenerMinBackoff = 50 * time.Millisecond
	ListenerMaxBackoff = 5 * time.Second
)

// NewListener returns a listener on a pgx-backed pool that wakes hub.
func NewListener(db *sql.DB, hub *Hub, log *slog.Logger) *Listener {
	if log == nil {
		log = slog.Default()
	}
	return &Listener{db: db, hub: hub, log: log, channels: map[string]bool{}, first: map[string]chan struct{}{}, added: make(chan struct{}, 1), ready: make(chan struct{})}
}

// Listen adds a channel; the running listener issues LISTEN for it at once.
func (l *Listener) Listen(channel string) {
	l.mu.Lock()
	if _, ok := l.channels[channel]; !ok {
		l.channels[channel] = false
		l.first[channel] = make(chan struct{})
	}
	l.mu.Unlock()
	select {
	case l.added <- struct{}{}:
	default:
	}
}

// Listening returns a channel closed once channel (added with Listen) has
// been listened to: from then on a notification on it is not missed,
// except across a reconnection, after which every waiter is woken.
func (l *Listener) Listening(channel string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.first[channel]; ok {
		return c
	}
	c := make(chan struct{})
	return c // never listened to: Listen was not called
}

// Ready returns a channel closed once every channel added so far is listened
// to on a live connection.
func (l *Listener) Ready() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, on := range l.channels {
		if !on {
			return l.ready
		}
	}
	if l.pid.Load() == 0 {
		return l.ready
	}
	done := make(chan struct{})
	close(done)
	return done
}

// PID is the server process of the listening connection, zero when none.
func (l *Listener) PID() uint32 { return l.pid.Load() }

// Run listens until ctx is done. It returns ctx's error.
func (l *Listener) Run(ctx context.Context) error {
	backoff := ListenerMinBackoff
	lost := false
	for {
		err := l.session(ctx, &lost)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !lost {
			l.log.Warn("notify: listener connection lost; reconnecting with backoff", "err", err)
			lost = true
		}
		if clockSleep(ctx, backoff) != nil {
			return ctx.Err()
		}
		backoff = min(backoff*2, ListenerMaxBackoff)
		if err == nil {
			backoff = ListenerMinBackoff
		}
	}
}

// session runs one connection's life.
func (l *Listener) session(ctx context.Context, lost *bool) error {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	l.mu.Lock()
	for ch := range l.channels {
		l.channels[ch] = false
	}
	l.mu.Unlock()
	defer l.pid.Store(0)
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("notify: listening needs a pgx connection, got %T", dc)
		}
		pc := sc.Conn()
		l.pid.Store(pc.PgConn().PID())
		first := true
		for {
			if err := l.listenNew(ctx, pc); err != nil {
				return err
			}
			if first {
				first = false
				if *lost {
					l.log.Info("notify: listener reconnected")
					*lost = false
				}
				// Whatever was notified while no session listened is gone:
				// every waiter claims once.
				l.wakeChannels()
			}
			waitCtx, stop := context.WithCancel(ctx)
			go func() {
				select {
				case <-l.added:
					stop()
				case <-waitCtx.Done():
				}
			}()
			n, err := pc.WaitForNotification(waitCtx)
			stop()
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if waitCtx.Err() != nil && !pc.PgConn().IsClosed() {
					continue // a channel was added
				}
				return err
			}
			if key, from := unstamp(n.Payload); from != l.hub.id {
				l.hub.Wake(n.Channel, key)
			}
		}
	})
}

// listenNew issues LISTEN for every channel not yet listened to on pc.
func (l *Listener) listenNew(ctx context.Context, pc *pgx.Conn) error {
	l.mu.Lock()
	var todo []string
	for ch, on := range l.channels {
		if !on {
			todo = append(todo, ch)
		}
	}
	l.mu.Unlock()
	for _, ch := range todo {
		if _, err := pc.Exec(ctx, dialect.Listen(ch)); err != nil {
			return fmt.Errorf("notify: LISTEN %q: %w", ch, err)
		}
	}
	l.mu.Lock()
	for _, ch := range todo {
		l.channels[ch] = true
		if c := l.first[ch]; c != nil {
			select {
			case <-c:
			default:
				close(c)
			}
		}
	}
	all := true
	for _, on := range l.channels {
		all = all && on
	}
	if all {
		close(l.ready)
		l.ready = make(chan struct{})
	}
	l.mu.Unlock()
	return nil
}

func (l *Listener) wakeChannels() {
	l.mu.Lock()
	chans := make([]string, 0, len(l.channels))
	for ch := range l.channels {
		chans = append(chans, ch)
	}
	l.mu.Unlock()
	for _, ch := range chans {
		l.hub.Wake(ch, "")
	}
}

func clockSleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
