package inbox_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
)

// While lease-form settlements are in flight, every connection of the
// service is cut and new ones are refused for 2 s (a failover's shape):
// each settlement is sent again until the database is back, well within
// the rows' lease, so no row comes back after its lease to be handled a
// second time, and none fails.
func TestLeaseSettlementsRideOutAnOutage(t *testing.T) {
	for _, outcome := range []string{"ack", "retry"} {
		t.Run(outcome, func(t *testing.T) {
			t.Parallel()
			real := inboxtest.Postgres(t)
			p, via := testdb.NewProxy(t, real)
			producer := open(t, real)
			const workers, total = 8, 40
			insert(t, producer.DB(), total)
			log := &logLines{}
			b := open(t, via, inbox.MaxConns(workers+2), inbox.WithLogger(slog.New(log)))
			q := inbox.MustQueue[Job]("jobs")
			rec := inboxtest.NewRecorder(t, producer, q)
			ev := inboxtest.NewEvents(t)

			// The first rows' handlers wait for the cut, so their
			// settlements go out while the database is unreachable.
			started, cut := make(chan struct{}, total), make(chan struct{})
			handle := func(ctx context.Context, j Job) error {
				started <- struct{}{}
				<-cut
				if outcome == "retry" {
					return inbox.RetryAfter(time.Hour, errors.New("later"))
				}
				return nil
			}
			sub, err := inbox.Subscribe(b, q, rec.Wrap("a", handle), rec.Observe("a"), ev.Observe(),
				inbox.Form(lease.Form), inbox.Workers(workers), inbox.Lease(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			inboxtest.RunSubscription(t, sub)
			receiveN(t, started, workers, "handlers started")

			p.Cut() // every connection ended, new ones refused
			close(cut)
			// Each settlement fails, then waits to be sent again: the log
			// says so. (A wait on time is the point: the outage's length.)
			eventually(t, "a settlement sent again", func() bool { return log.has("failed with the database; sent again") })
			time.Sleep(2 * time.Second)
			p.Restore()
			back := time.Now()

			if outcome == "ack" {
				eventually(t, "every row acked", func() bool { return rows(t, producer.DB()) == 0 })
				rec.ExactlyOnce(ids(1, total)...)
			} else {
				ev.Wait("every row retried", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Retried) == total })
				var early int
				if err := producer.DB().QueryRow("SELECT count(*) FROM jobs WHERE locked_until < now() + interval '30 minutes'").Scan(&early); err != nil {
					t.Fatal(err)
				}
				if early != 0 {
					t.Fatalf("%d rows available before their retry's hour: a retry was given up", early)
				}
				rec.ExactlyOnce(ids(1, total)...)
			}
			took := time.Since(back)
			s := sub.Stats()
			t.Logf("%s: all %d rows settled %v after the database came back (lease 10s); %d settlements sent again landed; stats %+v",
				outcome, total, took.Round(time.Millisecond), log.count("sent again landed"), s)
			if s.Failed != 0 || s.Lost != 0 {
				t.Fatalf("stats %+v: want no failed or lost settlement", s)
			}
			if n := log.count("sent again landed"); n == 0 {
				t.Fatal("no settlement logged as sent again and landed")
			}
		})
	}
}

// ids is first..last.
func ids(first, last int64) []int64 {
	var s []int64
	for id := first; id <= last; id++ {
		s = append(s, id)
	}
	return s
}

// logLines keeps the messages logged, for a test to look for.
type logLines struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logLines) WithGroup(string) slog.Handler            { return l }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}

func (l *logLines) count(part string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, part) {
			n++
		}
	}
	return n
}

func (l *logLines) has(part string) bool { return l.count(part) > 0 }
