package schedule

import "context"

// Crash ends s as a process that dies would: its pool is closed first, so
// nothing it does from then on reaches the database (its heartbeats and its
// name's hold stay, no share is settled or handed back), then its loops end
// and its handlers' contexts are cancelled.
func Crash(s *Scheduler) {
	s.db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Stop waits for no handler
	_ = s.Stop(ctx)
	s.runs.Wait()
}

// ParseSpec reads a spec back from its String.
var ParseSpec = parseSpec
