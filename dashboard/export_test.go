package dashboard

import "time"

// WithScan sets the window and budget of a state's view (see scanWindow);
// a negative budget reads one window a page.
func WithScan(window int, budget time.Duration) Option {
	return func(s *settings) error {
		s.scanWindow, s.scanBudget = window, budget
		return nil
	}
}
