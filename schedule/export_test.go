package schedule

// Crash ends s's loops without deleting its heartbeats, as a process that
// dies would.
func Crash(s *Scheduler) { s.crash() }

// ParseSpec reads a spec back from its String.
var ParseSpec = parseSpec
