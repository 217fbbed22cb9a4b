package inbox_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
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
