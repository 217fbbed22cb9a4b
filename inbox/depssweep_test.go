package inbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// A child stranded while its table's only subscription is a group's, idle,
// is released by the table's sweep: that subscription sends no claim (the
// group poller probes for it), so a sweep run by claims would never come.
// On a fake clock: the sweep at the subscription's start is the last until
// the clock moves.
func TestDepsSweepReleasesForAnIdleGroup(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		clk := fake()
		const poll = 20 * time.Millisecond
		b := open(t, url, inbox.WithClock(clk), inbox.PollInterval(poll))
		table := depsTable(t, b)
		q := inbox.MustQueue[Job](table).Group("idle")
		ran := make(chan int64, 4)
		sub, err := inbox.Subscribe(b, q, func(ctx context.Context, j Job) error { ran <- j.ID; return nil })
		if err != nil {
			t.Fatal(err)
		}
		inboxtest.RunSubscription(t, sub)
		parent := publishP(t, b, q, "parent", inbox.Delay(24*time.Hour))
		child := publishP(t, b, q, "child", inbox.After(parent))
		// The parent acked, its release lost with its process.
		if _, err := b.DB().Exec(fmt.Sprintf("DELETE FROM %s WHERE id = %d", table, parent)); err != nil {
			t.Fatal(err)
		}
		deadline := time.After(inboxtest.Timeout)
		for {
			select {
			case id := <-ran:
				if id != child {
					t.Fatalf("ran row %d, want the child %d", id, child)
				}
				return
			case <-time.After(50 * time.Millisecond):
				clk.Advance(5 * poll) // a sweep's interval at this poll
			case <-deadline:
				t.Fatalf("the stranded child %d did not run within %v of fake sweeps", child, inboxtest.Timeout)
			}
		}
	})
}
