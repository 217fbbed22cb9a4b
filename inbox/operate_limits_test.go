package inbox_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// Operator.Limits reads the slots a subscription with a limit holds while
// its handlers block: per key value, the fullest first; from a clock past
// the holds' end, every one of them expired. Without the slot table, no
// limits and no error.
func TestOperatorLimits(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url, inbox.PollInterval(200*time.Millisecond))
		ctx := context.Background()
		if ls, err := inbox.NewOperator(b).Limits(ctx); err != nil || ls != nil {
			t.Fatalf("Limits without the slot table = %v, %v; want nil, nil", ls, err)
		}
		table := keyedTable(t, b)
		insertKeyed(t, b.DB(), table, "a", "a", "a", "b")
		started := make(chan string, 4)
		release := make(chan struct{})
		sub, err := inbox.Subscribe(b, inbox.MustQueue[KeyedJob](table), func(ctx context.Context, j KeyedJob) error {
			started <- j.Customer
			<-release
			return nil
		}, inbox.Workers(4), inbox.Limit("customer", 2))
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		defer close(release)
		receiveN(t, started, 3, "two rows of a and one of b in work")

		ls, err := inbox.NewOperator(b).Limits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []inbox.LimitUse{{Name: table + ":customer", Keys: []inbox.KeyUse{{Key: "a", Held: 2}, {Key: "b", Held: 1}}}}
		if !reflect.DeepEqual(ls, want) {
			t.Fatalf("Limits = %+v, want %+v", ls, want)
		}

		later, err := inbox.Open(url, inbox.WithClock(clock.NewFake(time.Now().Add(time.Hour))))
		if err != nil {
			t.Fatal(err)
		}
		defer later.Close()
		ls, err = inbox.NewOperator(later).Limits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want[0].Keys[0].Expired, want[0].Keys[1].Expired = 2, 1
		if !reflect.DeepEqual(ls, want) {
			t.Fatalf("Limits an hour later = %+v, want %+v", ls, want)
		}
	})
}

// A registered service's limited subscription, on a registry made before
// limit_spec and upgraded by ApplyRegistry: Operator.Limits reads the
// limit's n and key column from the registry, and counts the rows of a
// full key value waiting (a's backlog of 5 behind its 2 in work; b, with a
// slot free, none), in every form (the advisory form leaves its rows in
// work available: they are not counted as waiting).
func TestOperatorLimitsWaiting(t *testing.T) {
	eachLimitCase(t, func(t *testing.T, form claim.Form, url string) {
		b := open(t, url, inbox.PollInterval(200*time.Millisecond))
		ctx := context.Background()
		table := keyedTable(t, b)
		id := "VARCHAR(255)"
		if b.Dialect() != "mysql" {
			id = "text"
		}
		if _, err := b.DB().Exec("CREATE TABLE sqlinbox_subscriptions (instance " + id + " NOT NULL, position integer NOT NULL, name text NOT NULL, table_name text NOT NULL, group_name text NOT NULL, form text NOT NULL, workers integer NOT NULL, lease_ms bigint NOT NULL, roles text NOT NULL, PRIMARY KEY (instance, position))"); err != nil {
			t.Fatal(err)
		}
		if err := migrations.ApplyRegistry(ctx, b.DB()); err != nil {
			t.Fatal(err)
		}
		insertKeyed(t, b.DB(), table, "a", "a", "a", "a", "a", "a", "a", "b")
		svc := inbox.NewService("tenants", "1", b)
		svc.Signals = false
		if err := svc.Register(inbox.RegistryHeartbeat(time.Second)); err != nil {
			t.Fatal(err)
		}
		started := make(chan string, 8)
		release := make(chan struct{})
		sub, err := inbox.Handle(svc, inbox.MustQueue[KeyedJob](table), func(ctx context.Context, j KeyedJob) error {
			started <- j.Customer
			<-release
			return nil
		}, inbox.Form(form), inbox.Workers(4), inbox.Limit("customer", 2))
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.StartLive(t, svc)
		t.Cleanup(func() { close(release) }) // before the service stops
		receiveN(t, started, 3, "two rows of a and one of b in work")

		ls, err := inbox.NewOperator(b).Limits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []inbox.LimitUse{{Name: table + ":customer", Column: "customer", N: 2, Tables: []string{table},
			Keys: []inbox.KeyUse{{Key: "a", Held: 2, Waiting: 5}, {Key: "b", Held: 1}}}}
		if !reflect.DeepEqual(ls, want) {
			t.Fatalf("Limits = %+v, want %+v", ls, want)
		}
		if n, err := inbox.NewOperator(b).LimitWaiting(ctx, sub); err != nil || n != 5 {
			t.Fatalf("LimitWaiting = %d, %v; want 5", n, err)
		}
		insts, err := inbox.NewOperator(b).Instances(ctx)
		if err != nil {
			t.Fatal(err)
		}
		spec := []inbox.LimitSpec{{Kind: inbox.LimitKindInWork, Name: table + ":customer", Column: "customer", N: 2}}
		if len(insts) != 1 || len(insts[0].Subscriptions) != 1 || !reflect.DeepEqual(insts[0].Subscriptions[0].Limits, spec) {
			t.Fatalf("Instances = %+v, want one subscription with the limits %+v", insts, spec)
		}
	})
}
