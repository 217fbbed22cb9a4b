package inbox_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/sqlinbox/sqlinbox/inbox"
)

// Hooks.Stopped is called once when Run returns: after a run, and after a
// start that failed its table check.
func TestHooksStopped(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		b := open(t, url)
		ctx := context.Background()
		runOnce := func(table string) (int64, error) {
			var stopped atomic.Int64
			svc := inbox.NewService("stopped", "1", b)
			svc.Signals = false
			if _, err := inbox.Handle(svc, inbox.MustQueue[Job](table), func(context.Context, Job) error { return nil }); err != nil {
				t.Fatal(err)
			}
			svc.AddHooks(inbox.Hooks{Stopped: func() { stopped.Add(1) }})
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- svc.Run(rctx) }()
			select {
			case <-svc.Started():
				if n := stopped.Load(); n != 0 {
					t.Errorf("Stopped called %d times while the service runs", n)
				}
				cancel()
				err := <-done
				return stopped.Load(), err
			case err := <-done:
				cancel()
				return stopped.Load(), err
			}
		}
		if n, err := runOnce("jobs"); err != nil || n != 1 {
			t.Errorf("a run: Stopped called %d times (Run: %v), want once", n, err)
		}
		if n, err := runOnce("no_such_table"); err == nil || n != 1 {
			t.Errorf("a failed start: Stopped called %d times (Run: %v), want once and an error", n, err)
		}
	})
}
