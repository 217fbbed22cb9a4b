package inbox

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
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

// permanent returns err as a *ConnectionError when it says the database will
// not take this connection however long we wait, and nil when it does not.
func permanent(err error) *ConnectionError {
	var ce *pgconn.ConnectError
	if err == nil || !errors.As(err, &ce) {
		return nil
	}
	target := "the database"
	if c := ce.Config; c != nil {
		u := url.URL{Scheme: "postgres", User: url.User(c.User), Host: net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port))), Path: "/" + c.Database}
		target = u.String()
	}
	var pe *pgconn.PgError
	var de *net.DNSError
	switch {
	case errors.As(err, &pe) && pe.Code == "3D000":
		return &ConnectionError{URL: target, Err: err, Fix: "fix the database name in the URL, or create the database (CREATE DATABASE)"}
	case errors.As(err, &pe) && pe.Code == "28P01":
		return &ConnectionError{URL: target, Err: err, Fix: "fix the password (in the URL, PGPASSWORD or ~/.pgpass)"}
	case errors.As(err, &pe) && pe.Code == "28000":
		return &ConnectionError{URL: target, Err: err, Fix: "fix the user name in the URL, or create the role (CREATE ROLE ... LOGIN) and allow it in pg_hba.conf"}
	case errors.As(err, &pe) && strings.HasPrefix(pe.Code, "28"):
		return &ConnectionError{URL: target, Err: err, Fix: "fix the credentials in the URL"}
	case errors.As(err, &de) && de.IsNotFound:
		return &ConnectionError{URL: target, Err: err, Fix: fmt.Sprintf("fix the host name in the URL (%q is not known to the resolver)", de.Name)}
	}
	return nil
}

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
// unreachable, or ctx ends. A connection refused for good (see permanent)
// is returned at once as a *ConnectionError. While the database cannot be reached it logs
// once and waits with backoff (host time: it paces retries, not the table).
func untilReachable(ctx context.Context, b *Broker, what string, f func() error) error {
	wait := minReconnect
	logged := false
	for {
		err := f()
		if pe := permanent(err); pe != nil {
			return pe
		}
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
