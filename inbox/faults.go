package inbox

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/engine"
)

// ConnectionError is a connection the database refused for good: an unknown
// database, role or host, or failed authentication. Waiting would not help,
// so Service.Run and Subscription.Run return it instead of retrying.
type ConnectionError struct {
	URL string // the database connected to, without its password
	Fix string // what to change
	Err error
}

func (e *ConnectionError) Error() string {
	return fmt.Sprintf("inbox: cannot connect to %s: %s; %s", e.URL, strings.TrimPrefix(e.Err.Error(), "inbox: "), e.Fix)
}

func (e *ConnectionError) Unwrap() error { return e.Err }

// permanent returns err as a *ConnectionError when the dialect says the
// database will not take this connection however long we wait, and nil when
// it does not.
func permanent(d *dialect.Dialect, err error) *ConnectionError {
	r := d.Refused(err)
	if r == nil {
		return nil
	}
	return &ConnectionError{URL: r.URL, Fix: r.Fix, Err: err}
}

// untilReachable calls f until it succeeds, fails with an error that is not
// unreachable, or ctx ends. A connection refused for good (see permanent)
// is returned at once as a *ConnectionError. While the database cannot be reached it logs
// once and waits with backoff (host time: it paces retries, not the table).
func untilReachable(ctx context.Context, b *Broker, what string, f func() error) error {
	wait := engine.MinFailWait
	logged := false
	for {
		err := f()
		if pe := permanent(b.d, err); pe != nil {
			return pe
		}
		if !b.d.Unreachable(err) {
			if err == nil && logged {
				b.log.Info("inbox: database reachable again", "while", what)
			}
			return err
		}
		if !logged {
			b.log.Error("inbox: database unreachable; retrying with backoff", "while", what, "err", err)
			logged = true
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(wait*2, engine.MaxFailWait)
	}
}
