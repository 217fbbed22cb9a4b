package inbox

import (
	"context"
	"database/sql/driver"
	"errors"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// unreachable reports whether err says the database could not be reached
// (refused, reset, restarting, shutting down) rather than that a statement
// was wrong: such errors are waited out with backoff, not returned.
func unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	var ce *pgconn.ConnectError
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &ce), errors.As(err, &ne), errors.Is(err, driver.ErrBadConn),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	case errors.As(err, &pe):
		// 08: connection exception; 57P01-57P03: admin shutdown, crash
		// shutdown, cannot connect now (starting up).
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	msg := err.Error()
	return strings.Contains(msg, "connection refused") || strings.Contains(msg, "unexpected EOF") ||
		strings.Contains(msg, "conn closed") || strings.Contains(msg, "broken pipe")
}

// Backoff between attempts to reach an unreachable database.
const (
	minReconnect = 100 * time.Millisecond
	maxReconnect = 30 * time.Second
)

// untilReachable calls f until it succeeds, fails with an error that is not
// unreachable, or ctx ends. While the database cannot be reached it logs
// once and waits with backoff (host time: it paces retries, not the table).
func untilReachable(ctx context.Context, b *Broker, what string, f func() error) error {
	wait := minReconnect
	logged := false
	for {
		err := f()
		if !unreachable(err) {
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
		wait = min(wait*2, maxReconnect)
	}
}
