package dashboard

import "time"

// WithScan sets cfg's window and budget of a state's view (see scanWindow);
// a negative budget reads one window a page.
func WithScan(cfg Config, window int, budget time.Duration) Config {
	cfg.scanWindow, cfg.scanBudget = window, budget
	return cfg
}
