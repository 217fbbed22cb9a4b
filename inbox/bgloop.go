package inbox

import "context"

// bgLoop is a goroutine of the broker that runs while any of its holders
// (running subscriptions) counts it: a table's sweep (depssweep.go), the
// checkpoints of SQLite's log (checkpoint.go).
type bgLoop struct {
	refs int
	stop context.CancelFunc
	done chan struct{}
}

// holdLoop counts a holder of the loop get returns, starting run as it
// when there is none (set records it, set(nil) forgets it); the returned
// function uncounts the holder and, for the last, ends run's context and
// waits for it to return.
func (b *Broker) holdLoop(get func() *bgLoop, set func(*bgLoop), run func(ctx context.Context)) func() {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := get()
	if l == nil {
		ctx, stop := context.WithCancel(context.Background())
		l = &bgLoop{stop: stop, done: make(chan struct{})}
		set(l)
		go func() {
			defer close(l.done)
			run(ctx)
		}()
	}
	l.refs++
	return func() {
		b.mu.Lock()
		l.refs--
		last := l.refs == 0
		if last {
			set(nil)
		}
		b.mu.Unlock()
		if last {
			l.stop()
			<-l.done
		}
	}
}
