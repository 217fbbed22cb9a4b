package readme_test

import (
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
)

// The defaults README.md states in "What happens to a row, with the
// defaults" (and docs/retries.md repeats): a change of one must change the
// text too.
func TestREADMEDefaults(t *testing.T) {
	for _, c := range []struct {
		what      string
		got, want time.Duration
	}{
		{"lease", inbox.DefaultLease, 30 * time.Second},
		{"timeout", inbox.DefaultTimeout, time.Minute},
		{"shutdown timeout", inbox.DefaultShutdownTimeout, 30 * time.Second},
		{"poll interval", inbox.DefaultPollInterval, time.Second},
		{"first backoff", inbox.DefaultBackoff(1), time.Second},
		{"second backoff", inbox.DefaultBackoff(2), 2 * time.Second},
		{"backoff cap", inbox.MaxBackoff, 10 * time.Minute},
		{"backoff cap reached", inbox.DefaultBackoff(40), 10 * time.Minute},
	} {
		if c.got != c.want {
			t.Errorf("the default %s is %v; README.md and docs/retries.md say %v", c.what, c.got, c.want)
		}
	}
	if inbox.DefaultMaxAttempts != 25 || inbox.DefaultWorkers != 1 {
		t.Errorf("MaxAttempts %d and Workers %d by default; README.md says 25 and 1", inbox.DefaultMaxAttempts, inbox.DefaultWorkers)
	}
}
