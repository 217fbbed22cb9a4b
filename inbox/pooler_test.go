package inbox_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlinbox/sqlinbox/claim"
	"github.com/sqlinbox/sqlinbox/claim/advisory"
	"github.com/sqlinbox/sqlinbox/claim/lease"
	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/notify"
)

// poolerModes are PgBouncer's two modes, by the variable naming each.
var poolerModes = []struct{ name, env string }{
	{"transaction", testdb.PgBouncerTxEnv},
	{"session", testdb.PgBouncerSessionEnv},
}

// poolerTable makes a reference table of a name of its own through b (the
// pooler's URLs set no search_path) and drops it at cleanup.
func poolerTable(t *testing.T, b *inbox.Broker) inbox.Queue[Job] {
	t.Helper()
	table := "pgb_" + testdb.UniqueName(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := migrations.Apply(ctx, b.DB(), table); err != nil {
		t.Fatal(err)
	}
	db := b.DB()
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + table) })
	q, err := inbox.NewQueue[Job](table)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// publishAllKinds publishes 20 rows with Publish, 20 with PublishTx and 40
// with PublishMany, and returns their ids.
func publishAllKinds(t *testing.T, b *inbox.Broker, q inbox.Queue[Job]) []int64 {
	t.Helper()
	ctx := context.Background()
	var ids []int64
	for range 20 {
		id, err := inbox.Publish(ctx, b, q, Job{Payload: []byte("p")})
		if err != nil {
			t.Fatalf("Publish: %v", err)
		}
		ids = append(ids, id)
	}
	for range 20 {
		tx, err := b.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		id, err := inbox.PublishTx(ctx, b, tx, q, Job{Payload: []byte("tx")})
		if err != nil {
			t.Fatalf("PublishTx: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	many := make([]Job, 40)
	for i := range many {
		many[i].Payload = []byte("many")
	}
	more, err := inbox.PublishMany(ctx, b, q, many)
	if err != nil {
		t.Fatalf("PublishMany: %v", err)
	}
	return append(ids, more...)
}

// Through PgBouncer in each mode, as users write the URL: every kind of
// publish works, the lease and row-lock forms (two brokers competing)
// handle every row exactly once, and the advisory form works in session
// mode and is refused at Subscribe, by name, in transaction mode.
func TestFormsBehindPgBouncer(t *testing.T) {
	forms := []struct {
		name string
		form claim.Form
	}{{"lease", lease.Form}, {"rowlock", rowlock.Form}, {"advisory", advisory.Form}}
	for _, mode := range poolerModes {
		t.Run(mode.name, func(t *testing.T) {
			url := testdb.PgBouncer(t, mode.env)
			for _, f := range forms {
				t.Run(f.name, func(t *testing.T) {
					if mode.name == "transaction" {
						// In session mode each client connection holds a
						// server connection of the pooler's few: one form at
						// a time.
						t.Parallel()
					}
					drainBehindPooler(t, url, mode.name, f.name, f.form)
				})
			}
		})
	}
}

func drainBehindPooler(t *testing.T, url, mode, formName string, form claim.Form) {
	brokers := make([]*inbox.Broker, 2)
	for i := range brokers {
		b, err := inbox.Open(url, inbox.PollInterval(50*time.Millisecond), inbox.MaxConns(4), inbox.WithHub(notify.NewHub()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		brokers[i] = b
	}
	q := poolerTable(t, brokers[0])
	want := map[string]string{"transaction": "transaction pooling", "session": "session pooling"}[mode]
	if got := brokers[0].Pooling(); got != want {
		t.Fatalf("Pooling() = %q, want %q", got, want)
	}
	ids := publishAllKinds(t, brokers[1], q)
	rec := inboxtest.NewRecorder(t, brokers[0], q)
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	t.Cleanup(func() { cancel(); running.Wait() })
	for i, b := range brokers {
		name := []string{"a", "b"}[i]
		sub, err := inbox.Subscribe(b, q, rec.Wrap(name, func(context.Context, Job) error { return nil }),
			inbox.Form(form), inbox.Workers(4), rec.Observe(name))
		if formName == "advisory" && mode == "transaction" {
			if !errors.Is(err, inbox.ErrTransactionPooling) || !errors.Is(err, inbox.ErrInvalid) || !strings.Contains(err.Error(), "pool_mode=session") {
				t.Fatalf("Subscribe of the advisory form behind transaction pooling: %v; want ErrTransactionPooling naming the fix", err)
			}
			t.Logf("refused: %v", err)
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		running.Go(func() {
			if err := sub.Run(ctx); err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	rec.WaitHandlings(len(ids))
	rec.WaitDrained()
	rec.ExactlyOnce(ids...)
}

// Behind transaction pooling, ListenURL gives the broker a listening
// connection of its own: a publish from another broker (which has no
// ListenURL, and says once that its own pickups fall back to the poll)
// wakes the subscription long before its poll.
func TestListenURLBehindTransactionPooling(t *testing.T) {
	pooled := testdb.PgBouncer(t, testdb.PgBouncerTxEnv)
	direct := testdb.Postgres(t)
	const poll = time.Minute

	var logs bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logs.Write(p)
	}), nil))
	pub, err := inbox.Open(pooled, inbox.ListenNotify(), inbox.PollInterval(poll), inbox.WithHub(notify.NewHub()), inbox.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	p := pub.Pickup()
	if p.Notified || p.Poll != poll || !strings.Contains(p.Fallback, "transaction mode") {
		t.Fatalf("Pickup() of a broker behind transaction pooling without ListenURL = %+v", p)
	}
	logMu.Lock()
	said := strings.Count(logs.String(), "fall back to the poll interval")
	logMu.Unlock()
	if said != 1 {
		t.Fatalf("the fallback is said %d times at start, want once:\n%s", said, logs.String())
	}

	sub, err := openBehindPooler(pooled, direct, inbox.PollInterval(poll), inbox.WithHub(notify.NewHub()))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if p := sub.Pickup(); !p.Notified || p.Fallback != "" {
		t.Fatalf("Pickup() with ListenURL = %+v", p)
	}
	q := poolerTable(t, sub)
	unheard, err := inbox.Subscribe(pub, q, func(context.Context, Job) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if st := unheard.Stats(); st.PickupFallback != p.Fallback {
		t.Fatalf("Stats().PickupFallback = %q, want the broker's %q", st.PickupFallback, p.Fallback)
	}
	got := make(chan time.Time, 1)
	s, err := inbox.Subscribe(sub, q, func(context.Context, Job) error {
		got <- time.Now()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitCtx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	if err := s.WaitIdle(waitCtx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := inbox.Publish(ctx, pub, q, Job{Payload: []byte("wake")}); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-got:
		t.Logf("picked up %v after the publish (poll %v)", at.Sub(start), poll)
	case <-time.After(poll / 3):
		t.Fatalf("a publish from another broker was not picked up within %v: the notification did not reach the ListenURL connection", poll/3)
	}
}

// docs/production.md, "Poolers": the broker on the pooled URL, its
// listener on a direct one.
func openBehindPooler(pooledURL, directURL string, opts ...inbox.Option) (*inbox.Broker, error) {
	return inbox.Open(pooledURL, append(opts, inbox.ListenURL(directURL))...)
}

// A ListenURL through a pooler in transaction mode is refused by name.
func TestListenURLRefusesTransactionPooling(t *testing.T) {
	pooled := testdb.PgBouncer(t, testdb.PgBouncerTxEnv)
	b, err := inbox.Open(pooled, inbox.ListenURL(pooled))
	if err == nil {
		b.Close()
		t.Fatal("ListenURL through transaction pooling accepted")
	}
	if !errors.Is(err, inbox.ErrTransactionPooling) || !strings.Contains(err.Error(), "ListenURL") {
		t.Fatalf("ListenURL through transaction pooling: %v", err)
	}
}

// The registry works behind transaction pooling: a registered service
// records itself and its subscription, and that its pickups fall back to
// the poll (ListenNotify without ListenURL), which the queue counts.
func TestRegistryBehindTransactionPooling(t *testing.T) {
	pooled := testdb.PgBouncer(t, testdb.PgBouncerTxEnv)
	b, err := inbox.Open(pooled, inbox.PollInterval(50*time.Millisecond), inbox.WithHub(notify.NewHub()), inbox.ListenNotify())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := migrations.ApplyRegistry(ctx, b.DB()); err != nil {
		t.Fatal(err)
	}
	q := poolerTable(t, b)
	svc := inbox.NewService("pgb_"+testdb.UniqueName(t), "1.0.0", b)
	svc.Signals = false
	if _, err := inbox.Handle(svc, q, func(context.Context, Job) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := svc.Register(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	<-svc.Started()
	eventually(t, "the instance in the registry", func() bool {
		all, err := inbox.NewOperator(b).Instances(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range all {
			if in.Service == svc.Name && in.Alive && len(in.Subscriptions) == 1 {
				if in.PickupFallback == "" || in.PickupFallback != b.Pickup().Fallback {
					t.Fatalf("the registry's PickupFallback %q, want the broker's %q", in.PickupFallback, b.Pickup().Fallback)
				}
				return true
			}
		}
		return false
	})
	qs, err := inbox.NewOperator(b).Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, qi := range qs {
		if qi.Table == q.Table() {
			found = true
			if qi.Instances != 1 || qi.Polled != 1 {
				t.Fatalf("queue %s: %d instances, %d polled; want 1 and 1", qi.Table, qi.Instances, qi.Polled)
			}
		}
	}
	if !found {
		t.Fatalf("queue of %s not listed: %+v", q.Table(), qs)
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A pool of the user's own, opened as pgx opens it by default (its
// statement cache on), is refused at New behind transaction pooling, with
// the setting that fixes it; in cache_describe mode it is taken.
func TestNewRefusesStatementCacheBehindTransactionPooling(t *testing.T) {
	pooled := testdb.PgBouncer(t, testdb.PgBouncerTxEnv)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pooled)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if b, err := inbox.New(pool); err == nil {
		b.Close()
		t.Fatal("New took a pool with pgx's statement cache behind transaction pooling")
	} else if !errors.Is(err, inbox.ErrTransactionPooling) || !strings.Contains(err.Error(), "default_query_exec_mode=cache_describe") {
		t.Fatalf("New: %v", err)
	}
	described, err := pgxpool.New(ctx, pooled+"&default_query_exec_mode=cache_describe")
	if err != nil {
		t.Fatal(err)
	}
	defer described.Close()
	b, err := inbox.New(described)
	if err != nil {
		t.Fatalf("New of a cache_describe pool: %v", err)
	}
	b.Close()
}
