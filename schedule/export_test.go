package schedule

// Crash ends s's loops without deleting its heartbeats, as a process that
// dies would.
func Crash(s *Scheduler) { s.crash() }
