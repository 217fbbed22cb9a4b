package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// historyJob is a row of the reference table.
type historyJob struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
}

// rows --state done lists the rows a subscription with a history acked,
// in words and in the JSON docs/operating.md describes, and searches them.
func TestRowsDone(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	everyDB(t, func(t *testing.T, url string) {
		ctx := context.Background()
		b, err := inbox.Open(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		if err := migrations.Apply(ctx, b.DB(), "jobs"); err != nil {
			t.Fatal(err)
		}
		if err := migrations.ApplyHistory(ctx, b.DB(), "jobs", "id", ""); err != nil {
			t.Fatal(err)
		}
		q := inbox.MustQueue[historyJob]("jobs")
		ev := inboxtest.NewEvents(t)
		sub, err := inbox.Subscribe(b, q, func(context.Context, historyJob) error { return nil }, inbox.History(time.Hour), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inbox.PublishMany(ctx, b, q, []historyJob{{Payload: []byte(`{"page": 1}`)}, {Payload: []byte(`{"page": 2}`)}}); err != nil {
			t.Fatal(err)
		}
		stop := inboxtest.RunSubscription(t, sub)
		ev.Wait("two acks", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) == 2 })
		stop()

		out := inboxCmd(t, "rows", "--db", url, "--table", "jobs", "--state", "done", "--json")
		var rows []map[string]any
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("rows --state done --json: %v\n%s", err, out)
		}
		if len(rows) != 2 || rows[0]["state"] != "done" || rows[0]["handled_by"] == "" || rows[0]["duration_seconds"] == nil || rows[0]["handled_at"] == nil {
			t.Fatalf("rows --state done --json: %v, want two done rows with when, by whom and how long", rows)
		}
		var v any
		_ = json.Unmarshal([]byte(out), &v)
		checkSchema(t, "rows", "", v, string(doc))
		text := inboxCmd(t, "rows", "--db", url, "--table", "jobs", "--state", "done")
		if !strings.Contains(text, "HANDLED") || !strings.Contains(text, `{"page": 2}`) {
			t.Fatalf("rows --state done:\n%s", text)
		}
		future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		if out := inboxCmd(t, "rows", "--db", url, "--table", "jobs", "--state", "done", "--handled-from", future, "--json"); strings.TrimSpace(out) != "[]" {
			t.Fatalf("done rows handled from an hour on: %s, want none", out)
		}
	})
}
