package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
)

// TracedJob is the reference table's row with a trace column.
type TracedJob struct {
	ID          int64          `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time     `db:"locked_until" inbox:"locked_until"`
	Payload     []byte         `db:"payload" inbox:"payload"`
	Trace       sql.NullString `db:"traceparent" inbox:"trace"`
}

type traceKey struct{}

// Publish, PublishTx and PublishMany write their context's trace context
// into the trace column, a row's own value wins, a plain-SQL producer's
// value is read as written, and each reaches Hooks.Started.
func TestTraceColumn(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url, inbox.WithTraceContext(func(ctx context.Context) string {
			s, _ := ctx.Value(traceKey{}).(string)
			return s
		}))
		if _, err := b.DB().Exec("ALTER TABLE jobs ADD COLUMN traceparent TEXT"); err != nil {
			t.Fatal(err)
		}
		q := inbox.MustQueue[TracedJob]("jobs")
		ctx := context.Background()
		in := func(s string) context.Context { return context.WithValue(ctx, traceKey{}, s) }
		want := map[string]string{} // payload -> trace column
		publish := func(payload, trace string, id int64, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("publish %s: %v", payload, err)
			}
			want[payload] = trace
		}
		id, err := inbox.Publish(in("tp-one"), b, q, TracedJob{Payload: []byte("one")})
		publish("one", "tp-one", id, err)
		id, err = inbox.Publish(in("tp-ctx"), b, q, TracedJob{Payload: []byte("own"), Trace: sql.NullString{String: "tp-own", Valid: true}})
		publish("own", "tp-own", id, err)
		id, err = inbox.Publish(ctx, b, q, TracedJob{Payload: []byte("none")})
		publish("none", "", id, err)
		tx, err := b.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		id, err = inbox.PublishTx(in("tp-tx"), b, tx, q, TracedJob{Payload: []byte("tx")})
		publish("tx", "tp-tx", id, err)
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		ids, err := inbox.PublishMany(in("tp-many"), b, q, []TracedJob{{Payload: []byte("many1")}, {Payload: []byte("many2"), Trace: sql.NullString{String: "tp-many-own", Valid: true}}})
		if err != nil || len(ids) != 2 {
			t.Fatalf("publish many: %v %v", ids, err)
		}
		want["many1"], want["many2"] = "tp-many", "tp-many-own"
		if _, err := b.DB().Exec("INSERT INTO jobs (payload, traceparent) VALUES ('sql', 'tp-sql')"); err != nil {
			t.Fatal(err)
		}
		want["sql"] = "tp-sql"

		stored := map[string]sql.NullString{}
		r, err := b.DB().Query("SELECT payload, traceparent FROM jobs")
		if err != nil {
			t.Fatal(err)
		}
		for r.Next() {
			var p []byte
			var tp sql.NullString
			if err := r.Scan(&p, &tp); err != nil {
				t.Fatal(err)
			}
			stored[string(p)] = tp
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		for p, tp := range want {
			if got := stored[p]; got.String != tp || got.Valid != (tp != "") {
				t.Errorf("row %s: trace column %+v, want %q (NULL when empty)", p, got, tp)
			}
		}

		var mu sync.Mutex
		started := map[int64]string{}
		handled := make(chan string, len(want))
		svc := inbox.NewService("traced", "1", b)
		svc.Signals = false
		svc.AddHooks(inbox.Hooks{Started: func(_ *inbox.Subscription, ctx context.Context, s inbox.StartEvent) context.Context {
			mu.Lock()
			started[s.ID] = s.Traceparent
			mu.Unlock()
			return ctx
		}})
		if _, err := inbox.Handle(svc, q, func(ctx context.Context, row TracedJob) error {
			mu.Lock()
			got := started[row.ID]
			mu.Unlock()
			if got != row.Trace.String {
				t.Errorf("row %d (%s): Started had traceparent %q, the row %q", row.ID, row.Payload, got, row.Trace.String)
			}
			if got != want[string(row.Payload)] {
				t.Errorf("row %s: Started had traceparent %q, want %q", row.Payload, got, want[string(row.Payload)])
			}
			handled <- string(row.Payload)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- svc.Run(rctx) }()
		receiveN(t, handled, len(want), "rows handled")
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// A trace column of a type that is not text is refused by the table check.
func TestTraceColumnType(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url)
		if _, err := b.DB().Exec("ALTER TABLE jobs ADD COLUMN traceparent INTEGER"); err != nil {
			t.Fatal(err)
		}
		_, err := inbox.Count(context.Background(), b, inbox.MustQueue[TracedJob]("jobs"))
		var te *inbox.TableError
		if !errors.As(err, &te) || te.Column != "traceparent" {
			t.Fatalf("an INTEGER trace column: got %v, want a TableError on column traceparent", err)
		}
		t.Log(err)
	})
}
