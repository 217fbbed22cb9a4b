package dialect_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
)

func TestMySQLDSN(t *testing.T) {
	dsn, err := dialect.MySQLDSN("mysql://app:s%40cret@db.example:3307/jobs?timeout=5s&parseTime=false")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("%s: %v", dsn, err)
	}
	if cfg.User != "app" || cfg.Passwd != "s@cret" || cfg.Addr != "db.example:3307" || cfg.DBName != "jobs" {
		t.Errorf("DSN %s: user %q password %q addr %q db %q", dsn, cfg.User, cfg.Passwd, cfg.Addr, cfg.DBName)
	}
	if !cfg.ParseTime || cfg.Loc != time.UTC || !cfg.ClientFoundRows || !cfg.InterpolateParams || cfg.MultiStatements {
		t.Errorf("DSN %s: parseTime %v loc %v clientFoundRows %v interpolateParams %v multiStatements %v", dsn, cfg.ParseTime, cfg.Loc, cfg.ClientFoundRows, cfg.InterpolateParams, cfg.MultiStatements)
	}
	if cfg.Params["time_zone"] != "'+00:00'" || cfg.Timeout != 5*time.Second {
		t.Errorf("DSN %s: time_zone %q timeout %v", dsn, cfg.Params["time_zone"], cfg.Timeout)
	}
	if dsn, _ := dialect.MySQLDSN("mysql://root@localhost/test"); !strings.HasPrefix(dsn, "root@tcp(localhost:3306)/test?") {
		t.Errorf("default port: %s", dsn)
	}
	for _, bad := range []string{"mysql://root@127.0.0.1:3306", "mysql:///test", "mysql://root@h/test?timeout=soon"} {
		if _, err := dialect.MySQLDSN(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if _, err := dialect.MySQLDSN("mysql://root:hunter2@h/test?timeout=soon"); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error shows the password or is nil: %v", err)
	}
}

// MySQL numbers no placeholders: the arguments of a Call follow the
// placeholders in the text, each as often as it appears.
func TestMySQLBind(t *testing.T) {
	d := dialect.Of(dialect.MySQL)
	q, args := d.Bind("SELECT $2, $1 WHERE x = $2", "a", "b")
	if q != "SELECT ?, ? WHERE x = ?" || fmt.Sprint(args) != "[b a b]" {
		t.Errorf("Bind = %q %v", q, args)
	}
	if got := d.Quote("app.jobs"); got != "`app`.`jobs`" {
		t.Errorf("Quote = %s", got)
	}
	tm := dialect.Times{Kind: dialect.MySQL, Encoding: dialect.EncodingFor(dialect.MySQL, "datetime(6)")}
	s := d.Inbox(dialect.Table{Name: "`jobs`", ID: "`id`", LockedUntil: "`locked_until`"}, tm)
	at := time.Date(2026, 1, 2, 3, 4, 5, 6789, time.UTC)
	c := s.Retry.Call(7, at, at, time.Second, "boom")
	if n := strings.Count(c.SQL, "?"); n != len(c.Args) {
		t.Errorf("%s: %d placeholders, %d args %v", c.SQL, n, len(c.Args), c.Args)
	}
}

// A URL opens a pool that reads times as UTC time.Time and counts matched
// rows; Detect tells the driver's own pools and a wrapped one, and refuses
// a pool without those settings, naming the DSN that has them.
func TestMySQLOpenAndDetect(t *testing.T) {
	ctx := context.Background()
	u := testdb.MySQL(t)
	db, d, err := dialect.Open(u)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if d.Kind != dialect.MySQL {
		t.Fatalf("kind %v", d.Kind)
	}
	if err := dialect.CheckMySQLPool(ctx, db); err != nil {
		t.Fatalf("a pool the URL opened is refused: %v", err)
	}
	if got, err := dialect.Detect(db); err != nil || got.Kind != dialect.MySQL {
		t.Fatalf("Detect = %v, %v", got, err)
	}
	// A pool through a wrapping driver is told by what the server answers.
	dsn, _ := dialect.MySQLDSN(u)
	c, err := mysql.MySQLDriver{}.OpenConnector(dsn)
	if err != nil {
		t.Fatal(err)
	}
	wrapped := sql.OpenDB(wrapConnector{c})
	defer wrapped.Close()
	if got, err := dialect.Detect(wrapped); err != nil || got.Kind != dialect.MySQL {
		t.Fatalf("Detect of a wrapped pool = %v, %v", got, err)
	}
	var now time.Time
	if err := db.QueryRowContext(ctx, "SELECT NOW(6)").Scan(&now); err != nil || now.Location() != time.UTC || time.Since(now).Abs() > time.Minute {
		t.Errorf("NOW(6) = %v, %v: want the time in UTC", now, err)
	}

	pu, _ := url.Parse(u)
	plain := fmt.Sprintf("%s@tcp(%s)%s", pu.User.Username(), pu.Host, pu.Path)
	bare, err := sql.Open("mysql", plain)
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	_, err = dialect.Detect(bare)
	if err == nil {
		t.Fatal("a pool without parseTime, UTC and clientFoundRows was accepted")
	}
	for _, want := range []string{"parseTime", "clientFoundRows", "parseTime=true", "loc=UTC", "time_zone=", "clientFoundRows=true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal does not say %q: %v", want, err)
		}
	}
	// The DSN the refusal gives opens a pool that passes, once the host is
	// put in.
	dsn = regexpDSN(t, err.Error())
	dsn = strings.Replace(strings.Replace(dsn, "host:3306", pu.Host, 1), ":password@", "@", 1)
	good, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	if _, err := dialect.Detect(good); err != nil {
		t.Errorf("the DSN the refusal gives (%s) is refused: %v", dsn, err)
	}
}

// wrapConnector stands for a wrapping driver (otelsql, sqlhooks).
type wrapConnector struct{ driver.Connector }

func (w wrapConnector) Driver() driver.Driver { return wrapDriver{} }

type wrapDriver struct{}

func (wrapDriver) Open(string) (driver.Conn, error) {
	return nil, errors.New("open through the connector")
}

func regexpDSN(t *testing.T, msg string) string {
	t.Helper()
	_, rest, ok := strings.Cut(msg, `sql.Open("mysql", "`)
	if !ok {
		t.Fatalf("no DSN in %q", msg)
	}
	dsn, _, _ := strings.Cut(rest, `"`)
	return dsn
}

// Connections the server refuses for good are told apart, with what to
// fix; a connection killed under a statement is a dead connection.
func TestMySQLFaults(t *testing.T) {
	ctx := context.Background()
	u := testdb.MySQL(t)
	pu, _ := url.Parse(u)
	for _, c := range []struct{ name, url, fix string }{
		{"unknown database", "mysql://" + pu.User.Username() + "@" + pu.Host + "/no_such_db_here", "database name"},
		{"access denied", "mysql://no_such_user:wrong@" + pu.Host + pu.Path, "user name or password"},
		{"unknown host", "mysql://root@no-such-host.invalid:3306/test", "host name"},
	} {
		db, d, err := dialect.Open(c.url)
		if err != nil {
			t.Fatal(err)
		}
		err = db.PingContext(ctx)
		db.Close()
		r := d.Refused(err)
		if r == nil || !strings.Contains(r.Fix, c.fix) || strings.Contains(r.URL, "wrong") || !strings.HasPrefix(r.URL, "mysql://") {
			t.Errorf("%s: Refused(%v) = %+v, want a fix about the %s and the URL without password", c.name, err, r, c.fix)
		}
		if d.DeadConn(err) {
			t.Errorf("%s: %v taken for a dead connection", c.name, err)
		}
	}

	db, d, err := dialect.Open(u)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var id int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err != nil {
		t.Fatal(err)
	}
	_, err = conn.ExecContext(ctx, "SELECT 1")
	if err == nil {
		t.Fatal("a statement on a killed connection succeeded")
	}
	if !d.DeadConn(err) || !d.Unreachable(err) || d.Refused(err) != nil {
		t.Errorf("killed connection: %v: DeadConn %v Unreachable %v Refused %+v", err, d.DeadConn(err), d.Unreachable(err), d.Refused(err))
	}
	for _, n := range []uint16{1213, 1205} {
		if c := fmt.Errorf("claim: %w", &mysql.MySQLError{Number: n}); !d.Conflict(c) || d.DeadConn(c) || d.Refused(c) != nil {
			t.Errorf("error %d: Conflict %v DeadConn %v: want a conflict to run again, not a connection fault", n, d.Conflict(c), d.DeadConn(c))
		}
	}
	wrong := &mysql.MySQLError{Number: 1146, Message: "Table 'test.jobs' doesn't exist"}
	if d.Conflict(wrong) || dialect.Of(dialect.Postgres).Conflict(&mysql.MySQLError{Number: 1213}) {
		t.Error("a wrong statement, or an error on another engine, taken for a conflict")
	}
	if d.DeadConn(wrong) || d.Unreachable(wrong) || d.Refused(wrong) != nil || errors.Is(wrong, mysql.ErrInvalidConn) {
		t.Errorf("a wrong statement taken for a connection fault")
	}
}

// Probe reads the server once: MariaDB here, whose statements return rows;
// a database ForceMySQL8 names is taken for MySQL 8.
func TestMySQLProbe(t *testing.T) {
	ctx := context.Background()
	db, d, err := dialect.Open(testdb.MySQL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if d.Server() != nil || d.Returns() {
		t.Fatalf("before Probe: server %v, Returns %v", d.Server(), d.Returns())
	}
	if err := d.Probe(ctx, db); err != nil {
		t.Fatal(err)
	}
	s := d.Server()
	var version string
	if err := db.QueryRow("SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	forced := false
	if s == nil || s.Version != version || s.MariaDB != (strings.Contains(version, "MariaDB") && !forced) || s.Increment < 1 {
		t.Fatalf("Probe read %+v of server %s (forced MySQL 8: %v)", s, version, forced)
	}
	if d.Returns() != s.MariaDB {
		t.Errorf("Returns %v on %+v", d.Returns(), s)
	}
	t.Logf("server %+v", *s)
	if got, err := dialect.Detect(db); err != nil || got.Server() == nil || got.Server().Version != version {
		t.Fatalf("Detect does not probe: %v, %v", got.Server(), err)
	}
	forced8, d8, err := dialect.Open(testdb.MySQL8(t, 2))
	if err != nil {
		t.Fatal(err)
	}
	defer forced8.Close()
	if err := d8.Probe(ctx, forced8); err != nil {
		t.Fatal(err)
	}
	if s := d8.Server(); s == nil || s.MariaDB || s.AutoincLockMode != 2 || d8.Returns() {
		t.Fatalf("a database forced to MySQL 8 probed as %+v", s)
	}
	if _, ok := d8.ConsecutiveIDs(); ok {
		t.Fatal("lock mode 2 taken for consecutive ids")
	}
}

// A real deadlock (1213) and a real lock wait timeout (1205) on MariaDB are
// conflicts to run again, not connection faults: two transactions lock two
// rows in opposite orders, and InnoDB rolls one back; a third waits on a
// held row past a one-second innodb_lock_wait_timeout. The two of the
// deadlock wait two minutes, so only the deadlock ends their waits, however
// slow the machine is to see the first wait and send the second.
func TestMySQLRealConflicts(t *testing.T) {
	url := testdb.MySQL(t)
	db, d, err := dialect.Open(url + "?innodb_lock_wait_timeout=120")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	short, _, err := dialect.Open(url + "?innodb_lock_wait_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE TABLE pair (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO pair VALUES (1, 0), (2, 0)"); err != nil {
		t.Fatal(err)
	}
	a, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Rollback()
	b, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Rollback()
	if _, err := a.ExecContext(ctx, "UPDATE pair SET v = v + 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ExecContext(ctx, "UPDATE pair SET v = v + 1 WHERE id = 2"); err != nil {
		t.Fatal(err)
	}
	// a waits for row 2; b's wait for row 1 closes the cycle, and InnoDB
	// rolls one of them back at once.
	aDone := make(chan error, 1)
	go func() {
		_, err := a.ExecContext(ctx, "UPDATE pair SET v = v + 1 WHERE id = 2")
		aDone <- err
	}()
	waitForLockWait(t, db)
	_, bErr := b.ExecContext(ctx, "UPDATE pair SET v = v + 1 WHERE id = 1")
	var deadlock error
	if bErr != nil {
		deadlock = bErr
		_ = b.Rollback()
		if err := <-aDone; err != nil {
			t.Fatalf("both transactions failed: %v; %v", bErr, err)
		}
	} else if deadlock = <-aDone; deadlock == nil {
		t.Fatal("two transactions locked two rows in opposite orders and neither was rolled back")
	}
	var me *mysql.MySQLError
	if !errors.As(deadlock, &me) || me.Number != 1213 {
		t.Fatalf("the deadlock's error: %v, want 1213", deadlock)
	}
	if !d.Conflict(deadlock) || d.DeadConn(deadlock) || d.Unreachable(deadlock) || d.Refused(deadlock) != nil {
		t.Errorf("real deadlock %v: Conflict %v DeadConn %v Unreachable %v: want a conflict to run again", deadlock, d.Conflict(deadlock), d.DeadConn(deadlock), d.Unreachable(deadlock))
	}
	_ = a.Rollback()
	_ = b.Rollback()

	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, "UPDATE pair SET v = v + 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	_, timeout := short.ExecContext(ctx, "UPDATE pair SET v = v + 1 WHERE id = 1")
	if !errors.As(timeout, &me) || me.Number != 1205 {
		t.Fatalf("a statement waiting past innodb_lock_wait_timeout: %v, want 1205", timeout)
	}
	if !d.Conflict(timeout) || d.DeadConn(timeout) || d.Unreachable(timeout) || d.Refused(timeout) != nil {
		t.Errorf("real lock wait timeout %v: Conflict %v DeadConn %v Unreachable %v: want a conflict to run again", timeout, d.Conflict(timeout), d.DeadConn(timeout), d.Unreachable(timeout))
	}
}

// waitForLockWait waits until a transaction of db's database waits for a
// row lock.
func waitForLockWait(t *testing.T, db *sql.DB) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, x := range testdb.Transactions(t, db) {
			if x.LockWait {
				return
			}
		}
	}
	t.Fatal("no transaction waited for a row lock within 30s")
}
