package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"runtime"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// countedMySQL opens a pool on a mysql:// URL, as inbox.Open sizes it,
// whose connections count the statements they send: MariaDB counts
// statements per server (Questions) or per user only at disconnect
// (userstat), so an idle broker's own statements are counted in process.
func countedMySQL(url string, n *atomic.Int64) (*sql.DB, error) {
	dsn, err := dialect.MySQLDSN(url)
	if err != nil {
		return nil, err
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(countingConnector{c, n})
	size := dialect.Of(dialect.MySQL).DefaultPoolSize(runtime.NumCPU())
	db.SetMaxOpenConns(size)
	db.SetMaxIdleConns(size)
	return db, nil
}

type countingConnector struct {
	driver.Connector
	n *atomic.Int64
}

func (c countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{conn: conn, n: c.n}, nil
}

// countingConn is go-sql-driver/mysql's connection with a count of the
// statements it runs (with interpolateParams every call is one statement).
type countingConn struct {
	conn driver.Conn
	n    *atomic.Int64
}

func (c *countingConn) Prepare(q string) (driver.Stmt, error) { return c.conn.Prepare(q) }
func (c *countingConn) Close() error                          { return c.conn.Close() }
func (c *countingConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.n.Add(1)
	tx, err := c.conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return countingTx{tx, c.n}, nil
}

func (c *countingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.n.Add(1)
	return c.conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (c *countingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.n.Add(1)
	return c.conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *countingConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	return c.conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
}

func (c *countingConn) Ping(ctx context.Context) error { return c.conn.(driver.Pinger).Ping(ctx) }
func (c *countingConn) ResetSession(ctx context.Context) error {
	return c.conn.(driver.SessionResetter).ResetSession(ctx)
}
func (c *countingConn) IsValid() bool { return c.conn.(driver.Validator).IsValid() }
func (c *countingConn) CheckNamedValue(v *driver.NamedValue) error {
	return c.conn.(driver.NamedValueChecker).CheckNamedValue(v)
}

type countingTx struct {
	driver.Tx
	n *atomic.Int64
}

func (t countingTx) Commit() error   { t.n.Add(1); return t.Tx.Commit() }
func (t countingTx) Rollback() error { t.n.Add(1); return t.Tx.Rollback() }
