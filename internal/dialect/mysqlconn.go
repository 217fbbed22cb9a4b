package dialect

import (
	"context"
	"database/sql/driver"
	"errors"
	"strings"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
)

// mysqlReadOnly says err is a write the server refused as read-only: the
// server runs with --read-only or --super-read-only (1290: a replica, or a
// demoted primary), or the session's transaction is read-only (1792). A
// connection that met it is dropped from a pool Open made (mysqlConn), as
// Postgres's 25006 is (dropReadOnly).
func mysqlReadOnly(err error) bool {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	// 1290 is every --option that prevents a statement: only the read-only
	// ones mean the connection is on the wrong server.
	return me.Number == 1792 || me.Number == 1290 && strings.Contains(me.Message, "read-only")
}

// mysqlConn is go-sql-driver/mysql's connection, made invalid once a
// statement on it was refused as read-only: database/sql asks IsValid as it
// takes a connection back and closes an invalid one, so the statement sent
// again takes another connection, perhaps on the new primary, where a
// read-only session kept in the pool would fail forever.
type mysqlConn struct {
	conn     driver.Conn
	readOnly atomic.Bool
}

// note marks the connection read-only when err says so, and returns err.
func (c *mysqlConn) note(err error) error {
	if err != nil && mysqlReadOnly(err) {
		c.readOnly.Store(true)
	}
	return err
}

func (c *mysqlConn) Prepare(q string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), q)
}

func (c *mysqlConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	s, err := c.conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
	if err != nil {
		return nil, c.note(err)
	}
	return mysqlStmt{Stmt: s, c: c}, nil
}

func (c *mysqlConn) Close() error { return c.conn.Close() }

func (c *mysqlConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *mysqlConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	return tx, c.note(err)
}

func (c *mysqlConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	r, err := c.conn.(driver.ExecerContext).ExecContext(ctx, q, args)
	return r, c.note(err)
}

func (c *mysqlConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	r, err := c.conn.(driver.QueryerContext).QueryContext(ctx, q, args)
	return r, c.note(err)
}

func (c *mysqlConn) Ping(ctx context.Context) error { return c.conn.(driver.Pinger).Ping(ctx) }

func (c *mysqlConn) ResetSession(ctx context.Context) error {
	if c.readOnly.Load() {
		return driver.ErrBadConn
	}
	return c.conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *mysqlConn) IsValid() bool {
	return !c.readOnly.Load() && c.conn.(driver.Validator).IsValid()
}

func (c *mysqlConn) CheckNamedValue(v *driver.NamedValue) error {
	return c.conn.(driver.NamedValueChecker).CheckNamedValue(v)
}

// mysqlStmt is a prepared statement of a mysqlConn (a pool whose URL sets
// interpolateParams=false prepares every statement with arguments).
type mysqlStmt struct {
	driver.Stmt
	c *mysqlConn
}

func (s mysqlStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	r, err := s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
	return r, s.c.note(err)
}

func (s mysqlStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	r, err := s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
	return r, s.c.note(err)
}

func (s mysqlStmt) CheckNamedValue(v *driver.NamedValue) error {
	return s.Stmt.(driver.NamedValueChecker).CheckNamedValue(v)
}
