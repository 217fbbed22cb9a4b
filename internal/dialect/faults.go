package dialect

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// What an error from the drivers says about the database behind it. These
// are driver facts: the engine and package inbox ask here instead of
// knowing the drivers' error types.

// Unreachable says err means the database could not be reached (refused,
// reset, restarting, shutting down) rather than that a statement was wrong:
// such errors are waited out with backoff, not returned.
func (d *Dialect) Unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	var ce *pgconn.ConnectError
	var pe *pgconn.PgError
	switch {
	case mysqlUnreachable(err), errors.As(err, &ce), errors.As(err, &ne), errors.Is(err, driver.ErrBadConn),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	case errors.As(err, &pe):
		// 08: connection exception; 57P01-57P03: admin shutdown, crash
		// shutdown, cannot connect now (starting up); 25006: a standby or a
		// demoted primary (its connection is dropped, see dropReadOnly).
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" || pe.Code == ReadOnly
	}
	msg := err.Error()
	return strings.Contains(msg, "connection refused") || strings.Contains(msg, "unexpected EOF") ||
		strings.Contains(msg, "conn closed") || strings.Contains(msg, "broken pipe")
}

// NoDatabase says err means the server has no database of the name the
// URL gives (Postgres 3D000, MariaDB/MySQL 1049), rather than that it could
// not be reached or refused the user.
func NoDatabase(err error) bool {
	var pe *pgconn.PgError
	var me *mysql.MySQLError
	return errors.As(err, &pe) && pe.Code == "3D000" || errors.As(err, &me) && me.Number == 1049
}

// DeadConn says err means the connection a statement ran on had ended
// (terminated, reset, closed), as opposed to the database refusing new
// ones: a statement sent again takes another connection of the pool.
func (d *Dialect) DeadConn(err error) bool {
	var ce *pgconn.ConnectError
	var me *mysqlConnectError
	if err == nil || errors.As(err, &ce) || errors.As(err, &me) || errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "connection refused") {
		return false
	}
	return d.Unreachable(err)
}

// ReadOnly is Postgres's read_only_sql_transaction: the session is on a
// standby, a demoted primary, or one made read-only. MariaDB/MySQL's are
// 1290 (--read-only) and 1792 (a read-only transaction): mysqlReadOnly.
const ReadOnly = "25006"

// dropReadOnly closes a connection whose statement was refused as
// read-only, as pgx closes one on a FATAL error: database/sql then drops it
// and the statement sent again takes another, perhaps on the new primary,
// where a read-only session kept in the pool would fail forever.
func dropReadOnly(next pgconn.PgErrorHandler) pgconn.PgErrorHandler {
	return func(c *pgconn.PgConn, e *pgconn.PgError) bool {
		if e.Code == ReadOnly {
			return false
		}
		return next == nil || next(c, e)
	}
}

// Refusal is a connection the database refused for good: an unknown
// database, role or host, or failed authentication. Waiting would not help.
type Refusal struct {
	URL string // the database connected to, without its password
	Fix string // what to change
}

// Refused returns what err says the database will not take however long
// one waits, or nil when it says nothing of the kind.
func (d *Dialect) Refused(err error) *Refusal {
	if d.Kind == MySQL {
		if err == nil {
			return nil
		}
		return mysqlRefused(err)
	}
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
		return &Refusal{URL: target, Fix: "fix the database name in the URL, or create the database (CREATE DATABASE)"}
	case errors.As(err, &pe) && pe.Code == "28P01":
		return &Refusal{URL: target, Fix: "fix the password (in the URL, PGPASSWORD or ~/.pgpass)"}
	case errors.As(err, &pe) && pe.Code == "28000":
		return &Refusal{URL: target, Fix: "fix the user name in the URL, or create the role (CREATE ROLE ... LOGIN) and allow it in pg_hba.conf"}
	case errors.As(err, &pe) && strings.HasPrefix(pe.Code, "28"):
		return &Refusal{URL: target, Fix: "fix the credentials in the URL"}
	case errors.As(err, &de) && de.IsNotFound:
		return &Refusal{URL: target, Fix: fmt.Sprintf("fix the host name in the URL (%q is not known to the resolver)", de.Name)}
	}
	return nil
}

// ConcurrentWriters says the database takes writes from several
// connections at once and flushes each commit (Postgres); SQLite has one
// writer and commits without a flush. The claim forms declare it to the
// engine as a trait.
func (d *Dialect) ConcurrentWriters() bool { return d.Kind != SQLite }

// BlockSequences says claims may take blocks of ids from a sequence (see
// InboxSQL.Ticket): Postgres only. MariaDB has sequences but MySQL none,
// and neither has the block claims written yet.
func (d *Dialect) BlockSequences() bool { return d.Kind == Postgres }

// Notifies says the database has LISTEN/NOTIFY (MariaDB and MySQL have none).
func (d *Dialect) Notifies() bool { return d.Kind == Postgres }

// SessionLocks says a connection can hold advisory locks across
// statements, several at once (pg_try_advisory_lock; GET_LOCK on MariaDB
// 10.0.2+ and MySQL 5.7+), as the advisory claim form needs.
func (d *Dialect) SessionLocks() bool { return d.Kind == Postgres || d.Kind == MySQL }

// RowLocks says a transaction can hold a row lock while a handler runs and
// other claimers skip the row (FOR UPDATE SKIP LOCKED), as the row-lock
// form needs: Postgres, and MariaDB 10.6+ / MySQL 8.0+.
func (d *Dialect) RowLocks() bool { return d.Kind == Postgres || d.Kind == MySQL }

// HoldTx is how a transaction that holds claimed rows begins: READ
// COMMITTED on MySQL, where InnoDB's REPEATABLE READ would keep a lock on
// every row a locking select passed over (and on the gaps between them)
// until the transaction ends; the engine's default (READ COMMITTED) on
// Postgres.
func (d *Dialect) HoldTx() *sql.TxOptions {
	if d.Kind == MySQL {
		return &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	return nil
}

// DefaultPoolSize is the pool a URL opens when no size is given: SQLite's
// one writer gains nothing from more than a few connections; a server
// serves a claim, handlers, publishes and settlements side by side.
func (d *Dialect) DefaultPoolSize(cpus int) int {
	if d.Kind == SQLite {
		return 4
	}
	return max(8, 4+cpus)
}
