package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// Rows whose payload cannot be decoded (NULL, or not JSON) are retried and
// then parked with the error kept; the other rows keep flowing.
func TestUndecodablePayloadsParked(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		clk := fake()
		b := open(t, url, inbox.WithClock(clk))
		db := b.DB()
		if _, err := db.Exec("INSERT INTO jobs (payload) VALUES (NULL)"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("INSERT INTO jobs (payload) VALUES ('{not json')"); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			if _, err := db.Exec(`INSERT INTO jobs (payload) VALUES ('{"n": 1}')`); err != nil {
				t.Fatal(err)
			}
		}
		ev := inboxtest.NewEvents(t)
		sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(ctx context.Context, j Job) error {
			var v struct{ N int }
			if err := json.Unmarshal(j.Payload, &v); err != nil {
				return err
			}
			return nil
		}, inbox.Workers(3), inbox.MaxAttempts(2), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		ev.Wait("5 acks and 2 retries", func(e []inbox.Event) bool {
			return inboxtest.Count(e, inbox.Acked) == 5 && inboxtest.Count(e, inbox.Retried) == 2
		})
		inboxtest.Idle(t, sub)
		clk.Advance(time.Minute)
		ev.Wait("2 parked", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Parked) == 2 })
		parked, err := inbox.ListParked(context.Background(), b, inbox.MustQueue[Job]("jobs"))
		if err != nil || len(parked) != 2 {
			t.Fatalf("parked = %v, %v", parked, err)
		}
		for _, p := range parked {
			if p.Attempts != 2 || !strings.Contains(p.LastError.String, "unexpected end of JSON input") && !strings.Contains(p.LastError.String, "invalid character") {
				t.Fatalf("parked row %d: attempts %d, last error %q", p.ID, p.Attempts, p.LastError.String)
			}
		}
	})
}

// A handler that blocks past its timeout is told so, retried with backoff,
// and parked after its last attempt; the subscription keeps running.
func TestBlockingHandlerTimesOut(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		clk := fake()
		b := open(t, url, inbox.WithClock(clk))
		insert(t, b.DB(), 1)
		ev := inboxtest.NewEvents(t)
		running := make(chan struct{}, 4)
		sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(ctx context.Context, j Job) error {
			running <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}, inbox.Lease(30*time.Second), inbox.Timeout(10*time.Second), inbox.MaxAttempts(2), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		for attempt := 1; attempt <= 2; attempt++ {
			<-running
			clk.Advance(10 * time.Second) // the timeout, before any extension is due
			ev.Wait("the timed-out handling settled", func(e []inbox.Event) bool { return len(e) == attempt })
			inboxtest.Idle(t, sub)
			clk.Advance(time.Minute)
		}
		evs := ev.Wait("parked", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Parked) == 1 })
		if !errors.Is(evs[0].Err, inbox.ErrTimeout) || evs[0].Outcome != inbox.Retried {
			t.Fatalf("first handling: %+v, want a retry for ErrTimeout", evs[0])
		}
	})
}

// A 10 MB payload goes through like any other.
func TestLargePayload(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url)
		q := inbox.MustQueue[Job]("jobs")
		big := make([]byte, 10<<20)
		for i := range big {
			big[i] = byte('a' + i%26)
		}
		if _, err := inbox.Publish(context.Background(), b, q, Job{Payload: big}); err != nil {
			t.Fatal(err)
		}
		got := make(chan int, 1)
		sub, err := inbox.Subscribe(b, q, func(ctx context.Context, j Job) error {
			if string(j.Payload[:26]) != "abcdefghijklmnopqrstuvwxyz" {
				t.Error("payload corrupted")
			}
			got <- len(j.Payload)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		select {
		case n := <-got:
			if n != len(big) {
				t.Fatalf("payload of %d bytes, want %d", n, len(big))
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a 10 MB payload was not handled within 30s")
		}
	})
}

// A dropped table is an error at each backoff, not a busy loop, and the
// subscription resumes once the table is back.
func TestTableDroppedMidRun(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url, inbox.PollInterval(50*time.Millisecond))
		ev := inboxtest.NewEvents(t)
		sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(context.Context, Job) error { return nil }, ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		inboxtest.Idle(t, sub)
		if _, err := b.DB().Exec("DROP TABLE jobs"); err != nil {
			t.Fatal(err)
		}
		before := sub.Stats().Claims
		start := time.Now()
		// Let the failing claims run for a while (a wait on time is the
		// point here: how many claims a second of failure costs).
		time.Sleep(time.Second)
		claims := sub.Stats().Claims - before
		t.Logf("claims in %v with the table gone: %d (poll 50ms, backoff doubling to 30s)", time.Since(start).Round(time.Millisecond), claims)
		if claims > 10 {
			t.Fatalf("%d claims in a second against a dropped table: a busy loop", claims)
		}
		if err := migrations.Apply(context.Background(), b.DB(), "jobs"); err != nil {
			t.Fatal(err)
		}
		insert(t, b.DB(), 3)
		b.Wake("jobs", "")
		ev.Wait("the 3 rows after the table came back", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 3 })
	})
}

// proxy forwards a local port to Postgres and can cut every connection, as
// a database restart or a network fault would.
type proxy struct {
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

func (p *proxy) start(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
}

func (p *proxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// A database unreachable at start is waited for; one lost mid-run is waited
// for again; no row is lost and the process is never restarted.
func TestDatabaseUnreachableAtStartAndMidRun(t *testing.T) {
	real := inboxtest.Postgres(t)
	u, err := url.Parse(real)
	if err != nil {
		t.Fatal(err)
	}
	// A free local port, nobody listening yet.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := &proxy{target: u.Host}
	defer p.stop()
	u.Host = addr
	via := u.String()

	producer := open(t, real)
	insert(t, producer.DB(), 5)

	b, err := inbox.Open(via, inbox.PollInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ev := inboxtest.NewEvents(t)
	svc := inbox.NewService("faults", "test", b)
	svc.Signals = false
	// A claim the server ran just as its connection was cut took its row
	// with it: the row comes back when its lease runs out, so the lease is
	// short enough for the waits below.
	if _, err := inbox.Handle(svc, inbox.MustQueue[Job]("jobs"), func(context.Context, Job) error { return nil }, ev.Observe(), inbox.Lease(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case err := <-done:
		t.Fatalf("Run gave up while the database was unreachable: %v", err)
	case <-svc.Started():
		t.Fatal("the service started with its database unreachable")
	case <-time.After(500 * time.Millisecond): // it is retrying; now bring the database up
	}
	p.start(t, addr)
	ev.Wait("the 5 rows once the database is reachable", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 5 })

	// Lost mid-run: cut every connection and refuse new ones for a while.
	p.stop()
	insert(t, producer.DB(), 5)
	p.start(t, addr)
	ev.Wait("the 5 rows written while connections were cut", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 10 })
	if n := rows(t, producer.DB()); n != 0 {
		t.Fatalf("%d rows left", n)
	}
}
