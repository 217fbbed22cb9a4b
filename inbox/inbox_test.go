package inbox_test

import (
	"context"
	"sync"
	"testing"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

func TestEveryRowHandledOnce(t *testing.T) {
	eachPublishDB(t, func(t *testing.T, url string) {
		b := open(t, url)
		insert(t, b.DB(), 200)
		q := inbox.MustQueue[Job]("jobs")
		var mu sync.Mutex
		seen := map[int64]int{}
		ev := inboxtest.NewEvents(t)
		sub, err := inbox.Subscribe(b, q, func(ctx context.Context, j Job) error {
			mu.Lock()
			seen[j.ID]++
			mu.Unlock()
			return nil
		}, inbox.Workers(8), ev.Observe())
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		ev.Wait("200 acks", func(e []inbox.Event) bool { return inboxtest.Count(e, inbox.Acked) >= 200 })
		if n := rows(t, b.DB()); n != 0 {
			t.Fatalf("%d rows left after 200 acks", n)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 200 {
			t.Fatalf("handled %d distinct rows, want 200", len(seen))
		}
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("row %d handled %d times", id, n)
			}
		}
	})
}
