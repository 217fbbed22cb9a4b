package inbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/claim/advisory"
	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/claim"
)

// Every pooled connection of a service is terminated while rows arrive:
// claims that fail on a dead connection are sent again at once on a fresh
// one, and settlements likewise, so handling resumes within 1.5 s (the
// figure is logged; the test fails only past 10 s, for a loaded machine),
// no settlement fails, and every row is acked once.
func TestEveryConnectionTerminated(t *testing.T) {
	for _, f := range []claim.Form{lease.Form, rowlock.Form, advisory.Form} {
		t.Run(f.Name(), func(t *testing.T) {
			t.Parallel()
			base := inboxtest.Postgres(t)
			producer := open(t, base)
			svcURL, app := appURL(t, base)
			b := open(t, svcURL, inbox.MaxConns(8))
			table := ownTable(t, b)
			ev := inboxtest.NewEvents(t)
			sub, err := inbox.Subscribe(b, inbox.MustQueue[Job](table), func(ctx context.Context, j Job) error { return nil },
				inbox.Form(f), inbox.Workers(4), ev.Observe())
			if err != nil {
				t.Fatal(err)
			}
			inboxtest.RunSubscription(t, sub)

			// Rows arrive all along, each announced as a publish would.
			var mu sync.Mutex
			written := map[int64]time.Time{}
			stop := produceEvery10ms(t, producer, b, table, &mu, written)
			ev.Wait("rows flowing", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) >= 20 })

			var n int
			killed := time.Now()
			if err := producer.DB().QueryRow(`SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				t.Fatal("terminated no session of the service")
			}
			// The first ack of a row written after the termination.
			evs := ev.Wait("a row written after the termination acked", func(e []inbox.Event) bool {
				mu.Lock()
				defer mu.Unlock()
				for _, x := range e {
					if x.Outcome == inbox.Acked && written[x.ID].After(killed) {
						return true
					}
				}
				return false
			})
			var resumed time.Duration
			mu.Lock()
			for _, x := range evs {
				if x.Outcome == inbox.Acked && written[x.ID].After(killed) {
					resumed = x.End.Sub(killed)
					break
				}
			}
			mu.Unlock()
			// The target is 1.5s (measured 10-98 ms); the test fails only
			// far past it, so a loaded CI machine does not make it flaky.
			t.Logf("%s: %d sessions terminated; handling of new rows resumed %v after (target: within 1.5s)", f.Name(), n, resumed.Round(time.Millisecond))
			if resumed > 10*time.Second {
				t.Errorf("handling resumed %v after every connection was terminated; want within 1.5s (fails past 10s)", resumed)
			}
			stop()
			mu.Lock()
			total := len(written)
			mu.Unlock()
			// Every row is handled and gone. (An ack whose connection ended
			// after its delete committed reports Lost: the row is gone all
			// the same.)
			eventually(t, "every row gone", func() bool {
				var n int
				return producer.DB().QueryRow("SELECT count(*) FROM "+table).Scan(&n) == nil && n == 0
			})
			all := ev.All()
			acks := map[int64]int{}
			for _, x := range all {
				if x.Outcome == inbox.Acked {
					acks[x.ID]++
				}
				if x.Outcome == inbox.Failed {
					t.Errorf("row %d: settlement failed: %v", x.ID, x.Err)
				}
			}
			for id, c := range acks {
				if c != 1 {
					t.Errorf("row %d acked %d times", id, c)
				}
			}
			t.Logf("%s: %d rows, stats %+v", f.Name(), total, sub.Stats())
		})
	}
}

// A settlement whose connection ended while the handler ran is sent again
// on a fresh one (it is fenced, so that is safe): the row is acked, not
// left to come back after its lease and be handled twice.
func TestSettlementOnADeadConnectionSentAgain(t *testing.T) {
	for _, outcome := range []string{"ack", "retry"} {
		t.Run(outcome, func(t *testing.T) {
			t.Parallel()
			base := inboxtest.Postgres(t)
			producer := open(t, base)
			svcURL, app := appURL(t, base)
			b := open(t, svcURL, inbox.MaxConns(4))
			insert(t, producer.DB(), 1)
			ev := inboxtest.NewEvents(t)
			sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(ctx context.Context, j Job) error {
				var n int
				if err := producer.DB().QueryRow(`SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil || n == 0 {
					t.Errorf("terminated %d sessions: %v", n, err)
				}
				if outcome == "retry" {
					return inbox.RetryAfter(time.Hour, errors.New("later"))
				}
				return nil
			}, ev.Observe())
			if err != nil {
				t.Fatal(err)
			}
			inboxtest.RunSubscription(t, sub)
			evs := ev.Wait("the settlement", func(e []inbox.Event) bool { return len(e) == 1 })
			want := map[string]inbox.Outcome{"ack": inbox.Acked, "retry": inbox.Retried}[outcome]
			if evs[0].Outcome != want {
				t.Fatalf("event %+v, want %s", evs[0], want)
			}
			if s := sub.Stats(); s.Failed != 0 {
				t.Fatalf("stats %+v, want no failed settlement", s)
			}
		})
	}
}

// produceEvery10ms writes a row into table through producer every 10 ms,
// waking b's subscriptions, and notes each row's write time in written
// under mu, until the stop it returns is called.
func produceEvery10ms(t *testing.T, producer, b *inbox.Broker, table string, mu *sync.Mutex, written map[int64]time.Time) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			var id int64
			if err := producer.DB().QueryRow("INSERT INTO " + table + " (payload) VALUES ('p') RETURNING id").Scan(&id); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			written[id] = time.Now()
			mu.Unlock()
			b.Wake(table, "")
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}
