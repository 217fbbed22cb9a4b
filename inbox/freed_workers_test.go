package inbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
)

// Under a backlog a worker freed while the others still run gets its next
// row at once, not at the next poll (an hour here): the workers wake the
// claim loop at the first of them freed, at half and at all, and the loop
// claims for the few freed once its short wait for more is over (or, on Postgres,
// they take the spare rows an earlier claim took beyond its free workers).
func TestFreedWorkersGetRowsWithoutAPoll(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url, inbox.PollInterval(time.Hour))
		insert(t, b.DB(), 12)
		started := make(chan int64, 12)
		release := make(chan struct{}, 32)
		sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(ctx context.Context, j Job) error {
			started <- j.ID
			<-release
			return nil
		}, inbox.Workers(4))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- sub.Run(ctx) }()
		t.Cleanup(func() {
			for range 12 {
				release <- struct{}{}
			}
			cancel()
			<-done
		})
		waitStarts := func(n int, what string) {
			t.Helper()
			receiveN(t, started, n, what+" (handlers started; the poll is an hour away)")
		}
		waitStarts(4, "the first claim")
		release <- struct{}{} // one worker of four freed
		waitStarts(1, "one worker freed")
		release <- struct{}{}
		release <- struct{}{} // two freed: half
		waitStarts(2, "two workers freed")
		for range 4 {
			release <- struct{}{} // all four freed
		}
		waitStarts(4, "every worker freed")
		want := int64(4)
		if !strings.HasPrefix(url, "sqlite") {
			// Where writers run side by side (Postgres, MariaDB) a claim
			// under a backlog may take rows beyond its free workers (spare
			// rows), which workers freed later start without a claim of
			// their own.
			want = 2
		}
		if st := sub.Stats(); st.Claims < want {
			t.Fatalf("%d claims for 11 rows started in four steps, want at least %d", st.Claims, want)
		}
	})
}
