package dialect

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MariaDB and MySQL through github.com/go-sql-driver/mysql. The library
// keeps times in DATETIME(6) columns, in UTC, so every pool must read them
// back as time.Time in UTC (parseTime=true, loc=UTC), its session must run
// in UTC (time_zone='+00:00', for NOW() and TIMESTAMP columns), and an
// UPDATE must count the rows it matched, not those it changed
// (clientFoundRows=true): a fenced statement that writes the value a row
// already has (an extension to the same lease) still holds the row.

// mysqlParams are the DSN parameters every pool needs, in the driver's
// spelling.
var mysqlParams = [][2]string{
	{"parseTime", "true"},
	{"loc", "UTC"},
	{"time_zone", "'+00:00'"},
	{"clientFoundRows", "true"},
}

// MySQLDSN turns a mysql:// URL into the DSN go-sql-driver/mysql takes:
//
//	mysql://user:pass@host:3306/db?param=value
//
// becomes user:pass@tcp(host:3306)/db?param=value plus the parameters the
// library needs (parseTime, loc=UTC, time_zone, clientFoundRows) and
// interpolateParams=true: the driver otherwise prepares, runs and closes a
// server-side statement for every call with arguments, three round trips
// where one does. The URL's own parameters are kept, but for those.
func MySQLDSN(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("mysql URL %s: %w", redact(rawURL), err)
	}
	if u.Scheme != "mysql" || u.Host == "" {
		return "", fmt.Errorf("mysql URL %s names no host: write mysql://user:password@host:3306/database", redact(rawURL))
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return "", fmt.Errorf("mysql URL %s names no database: write mysql://user:password@host:3306/database", redact(rawURL))
	}
	cfg := mysql.NewConfig()
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	cfg.Net = "tcp"
	cfg.Addr = u.Host
	if u.Port() == "" {
		cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	cfg.DBName = db
	q := u.Query()
	for _, p := range mysqlParams {
		q.Del(p[0])
	}
	if !q.Has("interpolateParams") {
		q.Set("interpolateParams", "true")
	}
	var b strings.Builder
	b.WriteString(cfg.FormatDSN())
	sep := "?"
	if strings.Contains(b.String(), "?") {
		sep = "&"
	}
	for _, p := range mysqlParams {
		fmt.Fprintf(&b, "%s%s=%s", sep, p[0], url.QueryEscape(p[1]))
		sep = "&"
	}
	for k, vs := range q {
		for _, v := range vs {
			fmt.Fprintf(&b, "&%s=%s", k, url.QueryEscape(v))
		}
	}
	// The parse checks what the URL's own parameters say, here rather than
	// at the first connection.
	if _, err := mysql.ParseDSN(b.String()); err != nil {
		return "", fmt.Errorf("mysql URL %s: %w", redact(rawURL), err)
	}
	return b.String(), nil
}

// openMySQL opens a pool on a mysql:// URL. Its connect errors carry the
// URL (without its password), so Refused can say which database refused.
func openMySQL(rawURL string) (*sql.DB, error) {
	dsn, err := MySQLDSN(rawURL)
	if err != nil {
		return nil, err
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", redact(rawURL), err)
	}
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", redact(rawURL), err)
	}
	u, _ := url.Parse(rawURL)
	u.User = url.User(u.User.Username())
	u.RawQuery = ""
	return sql.OpenDB(mysqlConnector{Connector: c, url: u.String()}), nil
}

// mysqlConnector marks the errors of a new connection as connect errors,
// and drops a connection once a write on it was refused as read-only
// (mysqlConn).
type mysqlConnector struct {
	driver.Connector
	url string
}

func (c mysqlConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, &mysqlConnectError{url: c.url, err: err}
	}
	return &mysqlConn{conn: conn}, nil
}

// mysqlConnectError is an error opening a new connection (the server
// refused it, or could not be reached), as opposed to one of a statement.
type mysqlConnectError struct {
	url string
	err error
}

func (e *mysqlConnectError) Error() string { return "connect to " + e.url + ": " + e.err.Error() }
func (e *mysqlConnectError) Unwrap() error { return e.err }

// CheckMySQLPool refuses a pool of go-sql-driver/mysql that reads times
// other than as time.Time in UTC (parseTime, loc), runs its session in
// another time zone, or counts changed rather than matched rows
// (clientFoundRows): locked_until would be misread, or a fenced statement
// that wrote the value the row had would look lost. It answers with the
// DSN that has every setting.
func CheckMySQLPool(ctx context.Context, db *sql.DB) error {
	var problems []string
	var at any
	var tz string
	if err := db.QueryRowContext(ctx, "SELECT CAST('2000-01-01 00:00:00' AS DATETIME(6)), @@session.time_zone").Scan(&at, &tz); err != nil {
		return fmt.Errorf("mysql: read how the pool reads times: %w", err)
	}
	switch t := at.(type) {
	case time.Time:
		if t.Location() != time.UTC {
			problems = append(problems, fmt.Sprintf("it reads DATETIME in %s, not UTC (loc)", t.Location()))
		}
	default:
		problems = append(problems, fmt.Sprintf("it reads DATETIME as %T, not time.Time (parseTime)", at))
	}
	if tz != "+00:00" && !strings.EqualFold(tz, "UTC") {
		problems = append(problems, fmt.Sprintf("its sessions run in time zone %s, not UTC (time_zone)", tz))
	}
	found, err := matchedRows(ctx, db)
	if err != nil {
		return err
	}
	if !found {
		problems = append(problems, "an UPDATE counts the rows it changed, not those it matched (clientFoundRows)")
	}
	if len(problems) == 0 {
		return nil
	}
	var user, dbName sql.NullString
	_ = db.QueryRowContext(ctx, "SELECT SUBSTRING_INDEX(CURRENT_USER(), '@', 1), DATABASE()").Scan(&user, &dbName)
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = or(user.String, "user"), "password", "tcp", "host:3306", or(dbName.String, "database")
	dsn := cfg.FormatDSN()
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	for _, p := range mysqlParams {
		dsn += sep + p[0] + "=" + url.QueryEscape(p[1])
		sep = "&"
	}
	return fmt.Errorf("mysql pool is not set up as the library needs: %s. Open it with sql.Open(\"mysql\", %q) (your own host and password), "+
		"or with inbox.OpenDB(\"mysql://%s:password@host:3306/%s\"), which sets them", strings.Join(problems, "; "), dsn, cfg.User, cfg.DBName)
}

// matchedRows reports whether the pool's UPDATEs count the rows they
// matched: it updates a temporary table's row to the value it has.
func matchedRows(ctx context.Context, db *sql.DB) (bool, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return false, fmt.Errorf("mysql: check the pool: %w", err)
	}
	defer conn.Close()
	for _, q := range []string{
		"CREATE TEMPORARY TABLE IF NOT EXISTS sqlinbox_found_rows (x INT)",
		"DELETE FROM sqlinbox_found_rows",
		"INSERT INTO sqlinbox_found_rows VALUES (1)",
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return false, fmt.Errorf("mysql: check whether the pool counts matched rows (%s): %w", q, err)
		}
	}
	res, err := conn.ExecContext(ctx, "UPDATE sqlinbox_found_rows SET x = 1")
	if err != nil {
		return false, fmt.Errorf("mysql: check whether the pool counts matched rows: %w", err)
	}
	n, _ := res.RowsAffected()
	_, _ = conn.ExecContext(ctx, "DROP TEMPORARY TABLE sqlinbox_found_rows")
	return n == 1, nil
}

// mysqlUnreachable says a MySQL error means the server could not be
// reached or ended the connection: the driver's invalid connection, the
// server shutting down (1053), a killed connection (1927 on MariaDB, 3169
// on MySQL 8), one closed for inactivity (4031, MySQL 8.0.24+), too many
// connections (1040), a write refused as read-only (mysqlReadOnly: the
// connection is dropped, as Postgres's 25006 is).
func mysqlUnreachable(err error) bool {
	var me *mysql.MySQLError
	if errors.Is(err, mysql.ErrInvalidConn) || mysqlReadOnly(err) {
		return true
	}
	if errors.As(err, &me) {
		switch me.Number {
		case 1053, 1927, 3169, 4031, 1040, 1317:
			return true
		}
	}
	return false
}

// mysqlRefused is the MySQL side of Refused.
func mysqlRefused(err error) *Refusal {
	var ce *mysqlConnectError
	connect := errors.As(err, &ce)
	target := "the database"
	if connect {
		target = ce.url
	}
	var me *mysql.MySQLError
	var de *net.DNSError
	switch {
	case errors.As(err, &me) && (me.Number == 1049):
		return &Refusal{URL: target, Fix: "fix the database name in the URL, or create the database (CREATE DATABASE)"}
	case errors.As(err, &me) && (me.Number == 1045 || me.Number == 1698):
		return &Refusal{URL: target, Fix: "fix the user name or password in the URL, or create the user (CREATE USER ... IDENTIFIED BY ...; GRANT ALL ON db.* TO ...)"}
	case errors.As(err, &me) && me.Number == 1044:
		return &Refusal{URL: target, Fix: "grant the user access to the database (GRANT ALL ON db.* TO ...)"}
	case errors.As(err, &de) && de.IsNotFound: // only a dial resolves names
		return &Refusal{URL: target, Fix: fmt.Sprintf("fix the host name in the URL (%q is not known to the resolver)", de.Name)}
	}
	return nil
}

// Conflict says err is a statement the database refused for a conflict
// with another transaction (MySQL's deadlock 1213, which rolls back the
// whole transaction, or lock wait timeout 1205, which rolls back the
// statement): a caller that rolls its transaction back has written nothing,
// and may run it again at once.
func (d *Dialect) Conflict(err error) bool {
	var me *mysql.MySQLError
	return d != nil && d.Kind == MySQL && errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}
