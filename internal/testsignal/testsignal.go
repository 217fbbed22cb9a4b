// Package testsignal marks a moment in a production type's work that a
// test holds the work at, one instance at a time (River's testsignal is the
// model). Production code only calls Reach; a Signal no test armed, the
// only kind outside tests, does nothing there but a nil check.
package testsignal

// Signal is a moment that carries a value of T.
type Signal[T any] struct {
	reached chan T
	resume  chan struct{}
}

// Hold arms the signal: from now on each Reach hands its value to the test
// and waits until the test calls Resume. Call it before the work starts.
func (s *Signal[T]) Hold() {
	s.reached = make(chan T)
	s.resume = make(chan struct{})
}

// Reach is the moment. Armed, it waits until the test received v and
// called Resume.
func (s *Signal[T]) Reach(v T) {
	if s.reached == nil {
		return
	}
	s.reached <- v
	<-s.resume
}

// Reached delivers the value of each Reach of an armed signal.
func (s *Signal[T]) Reached() <-chan T { return s.reached }

// Resume lets the work held at the moment go on.
func (s *Signal[T]) Resume() { s.resume <- struct{}{} }
