package dialect

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// A connection that ended is sent to again at once; a database that
// refuses connections is backed off from; a wrong statement is neither.
func TestDriverFaults(t *testing.T) {
	d := Of(Postgres)
	ended := &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}
	refused := fmt.Errorf("dial: %w", syscall.ECONNREFUSED)
	wrong := &pgconn.PgError{Code: "42P01", Message: `relation "jobs" does not exist`}
	for _, c := range []struct {
		name              string
		err               error
		unreachable, dead bool
	}{
		{"terminated", ended, true, true},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true, true},
		{"refused", refused, true, false},
		{"refused, as text", errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), true, false},
		{"wrong statement", wrong, false, false},
		{"read-only node", &pgconn.PgError{Code: "25006", Message: "cannot execute INSERT in a read-only transaction"}, true, true},
		{"canceled", context.Canceled, false, false},
		{"none", nil, false, false},
	} {
		if got := d.Unreachable(c.err); got != c.unreachable {
			t.Errorf("%s: Unreachable(%v) = %v, want %v", c.name, c.err, got, c.unreachable)
		}
		if got := d.DeadConn(c.err); got != c.dead {
			t.Errorf("%s: DeadConn(%v) = %v, want %v", c.name, c.err, got, c.dead)
		}
		if r := d.Refused(c.err); r != nil {
			t.Errorf("%s: Refused(%v) = %+v, want nil (not a connect error)", c.name, c.err, r)
		}
	}
}
