package inbox_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// One broker holds a subscription per group of 100 on a one-minute poll. A
// row that plain SQL inserts into one group is announced by the group
// trigger to that group alone: at most two claims in all (the group's, and
// one more if a claim was in flight), where the whole-table trigger makes
// every subscription claim. A statement that writes more groups than a
// notification names wakes them all.
func TestGroupTriggerWakesOnlyTheGroupWritten(t *testing.T) {
	url := inboxtest.Postgres(t)
	b := open(t, url, inbox.ListenNotify(), inbox.PollInterval(time.Minute))
	ctx := context.Background()
	got := make(chan Job, 100)
	var subs []*inbox.Subscription
	subscribe := func(groups ...int) {
		for _, g := range groups {
			q := inbox.MustQueue[Job]("jobs").Group(fmt.Sprintf("g%d", g))
			sub, err := inbox.Subscribe(b, q, func(ctx context.Context, j Job) error { got <- j; return nil })
			if err != nil {
				t.Fatal(err)
			}
			inboxtest.RunSubscription(t, sub)
			subs = append(subs, sub)
		}
		<-b.Listener().Ready()
	}
	idle := func() int64 {
		var claims int64
		for _, s := range subs {
			inboxtest.Idle(t, s)
			claims += s.Stats().Claims
		}
		return claims
	}
	// pickups inserts n rows into group g one at a time, each once the last
	// was handled, and returns the claims they caused and their pickup times.
	pickups := func(g string, n int) (claims int64, waits []time.Duration) {
		t.Helper()
		before := idle()
		for range n {
			start := time.Now()
			if _, err := b.DB().Exec("INSERT INTO jobs (group_name, payload) VALUES ($1, 'sql')", g); err != nil {
				t.Fatal(err)
			}
			select {
			case j := <-got:
				waits = append(waits, time.Since(start))
				if j.Group != g {
					t.Fatalf("a row of group %q went to %q", g, j.Group)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("a row inserted into %s was not handled within 20s on a one-minute poll", g)
			}
			idle()
		}
		return idle() - before, waits
	}
	p50 := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }

	const n = 20
	if err := migrations.ApplyGroupNotifyTrigger(ctx, b.DB(), "jobs", "group_name"); err != nil {
		t.Fatal(err)
	}
	subscribe(42)
	_, alone := pickups("g42", n)
	subscribe(slices.Collect(func(yield func(int) bool) {
		for g := range 100 {
			if g != 42 && !yield(g) {
				return
			}
		}
	})...)

	if err := migrations.ApplyNotifyTrigger(ctx, b.DB(), "jobs"); err != nil {
		t.Fatal(err)
	}
	wholeClaims, _ := pickups("g42", 3)
	t.Logf("whole-table trigger: %d claims for 3 rows inserted into one of 100 groups", wholeClaims)

	if err := migrations.ApplyGroupNotifyTrigger(ctx, b.DB(), "jobs", "group_name"); err != nil {
		t.Fatal(err)
	}
	claims, waits := pickups("g42", n)
	t.Logf("group trigger: %d claims for %d rows inserted into one of 100 groups (%.2f a row), pickup p50 %v; with one group subscribed, p50 %v",
		claims, n, float64(claims)/n, p50(waits), p50(alone))
	if claims > 2*n {
		t.Fatalf("group trigger: %d claims for %d rows, want at most 2 a row", claims, n)
	}
	if wholeClaims < 3*50 {
		t.Errorf("whole-table trigger: %d claims for 3 rows; expected every subscription to claim (the comparison means nothing)", wholeClaims)
	}

	// One statement into 20 groups: more than a notification names, so every
	// subscription is woken, and each row is handled.
	if _, err := b.DB().Exec("INSERT INTO jobs (group_name, payload) SELECT 'g' || i, 'many' FROM generate_series(0, 19) AS i"); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		select {
		case <-got:
		case <-time.After(20 * time.Second):
			t.Fatalf("a statement into 20 groups: %d of 20 rows handled within 20s on a one-minute poll", i)
		}
	}
}

// The group trigger takes a checked identifier for its column.
func TestGroupTriggerRefusesABadColumn(t *testing.T) {
	db := inboxtest.Open(t, inboxtest.Postgres(t))
	err := migrations.ApplyGroupNotifyTrigger(context.Background(), db, "jobs", "group'; DROP TABLE jobs; --")
	if err == nil {
		t.Fatal("a column name with a quote was accepted")
	}
	t.Log(err)
}
