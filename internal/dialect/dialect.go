// Package dialect holds what differs between SQLite, Postgres and
// MariaDB/MySQL: how a URL opens a pool, placeholders, quoting, how a time
// is written and compared, SKIP LOCKED, driver facts, and the text of every
// statement the library runs.
//
// Each statement is written once, beside the typed Call that gives its
// parameters in the order its text numbers them: an inbox table's claims
// (claims.go), settlements (settle.go), the advisory form's walk
// (advisory.go), counts by state (states.go), publishes and keys
// (publish.go, keys.go), operators' statements (admin.go, inspect.go), the
// table check's types and fixes (fixes.go), and the lock, registry and
// schedule tables (lock.go, registry.go, schedule.go). Statements are
// written with $n placeholders and built from what an engine answers
// (Rebind, SkipLocked, InList, Times.At, ColumnDecl...): an engine is
// those answers, not a branch in every caller.
package dialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/stdlib"
	"modernc.org/sqlite"
)

// Kind names a database engine.
type Kind int

const (
	SQLite Kind = iota + 1
	Postgres
	// MySQL is MariaDB (10.6 or later) or MySQL (8.0.13 or later), through
	// github.com/go-sql-driver/mysql.
	MySQL
)

func (k Kind) String() string {
	switch k {
	case SQLite:
		return "sqlite"
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	}
	return "unknown"
}

// Dialect is one engine's way of writing the shared statements.
type Dialect struct {
	Kind Kind
	// server is what a MySQL-kind server is, once Probe read it.
	server atomic.Pointer[Server]
}

// Of returns the dialect of kind k.
func Of(k Kind) *Dialect { return &Dialect{Kind: k} }

// Detect tells the dialect of a pool: from the driver when it is
// modernc.org/sqlite's, pgx's or go-sql-driver/mysql's own, otherwise by
// what the database answers (select version() on Postgres, select
// sqlite_version() on SQLite, select @@version_comment on MariaDB and
// MySQL), so a pool opened through a wrapping driver (otelsql, sqlhooks) is
// served too. A SQLite pool must wait for the writer's lock: one whose
// connections have no busy timeout is refused (see CheckSQLitePool); a
// MySQL pool must read times in UTC (see CheckMySQLPool), and its server be
// MariaDB 10.6+ or MySQL 8.0.13+ (see Probe).
func Detect(db *sql.DB) (*Dialect, error) {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	var k Kind
	switch db.Driver().(type) {
	case *sqlite.Driver:
		k = SQLite
	case *stdlib.Driver:
		k = Postgres
	case *mysql.MySQLDriver, mysql.MySQLDriver:
		k = MySQL
	default:
		var err error
		if k, err = probe(ctx, db); err != nil {
			return nil, err
		}
	}
	switch k {
	case SQLite:
		if err := CheckSQLitePool(ctx, db); err != nil {
			return nil, err
		}
	case MySQL:
		if err := CheckMySQLPool(ctx, db); err != nil {
			return nil, err
		}
		d := Of(k)
		if err := d.Probe(ctx, db); err != nil {
			return nil, err
		}
		return d, nil
	}
	return Of(k), nil
}

// probeTimeout bounds the statements Detect runs.
const probeTimeout = 30 * time.Second

// probe asks the database behind an unknown driver what it is.
func probe(ctx context.Context, db *sql.DB) (Kind, error) {
	var v string
	pgErr := db.QueryRowContext(ctx, "SELECT version()").Scan(&v)
	if pgErr == nil && strings.HasPrefix(v, "PostgreSQL ") {
		return Postgres, nil
	}
	if pgErr == nil {
		// MariaDB and MySQL answer version() too; Postgres and SQLite
		// know no @@ variables.
		var comment string
		if err := db.QueryRowContext(ctx, "SELECT @@version_comment").Scan(&comment); err == nil {
			return MySQL, nil
		}
	}
	liteErr := db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&v)
	if liteErr == nil {
		return SQLite, nil
	}
	answer := v
	if pgErr != nil {
		answer = "select version(): " + pgErr.Error() + "; select sqlite_version(): " + liteErr.Error()
	}
	return 0, fmt.Errorf("driver %T: could not tell SQLite, Postgres or MySQL from what its database answers (%s): use modernc.org/sqlite, github.com/jackc/pgx/v5/stdlib or github.com/go-sql-driver/mysql, or a wrapper of one", db.Driver(), answer)
}

// CheckSQLitePool refuses a SQLite pool whose connections fail at once with
// SQLITE_BUSY ("database is locked") when another connection writes: a
// queue, a lock or a schedule shares the file with other writers, and
// without a busy timeout claims, acks and startup hooks fail under
// contention. It reads one connection's busy_timeout: set it in the DSN, so
// every connection of the pool has it.
func CheckSQLitePool(ctx context.Context, db *sql.DB) error {
	var ms int
	if err := db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&ms); err != nil {
		return fmt.Errorf("sqlite: read the pool's busy_timeout: %w", err)
	}
	if ms > 0 {
		return nil
	}
	file, _ := SQLiteFile(ctx, db)
	if file == "" {
		file = "/path/to/app.db"
	}
	return fmt.Errorf("sqlite pool has no busy timeout (PRAGMA busy_timeout is 0): its statements would fail with SQLITE_BUSY whenever another connection writes. "+
		"Open it with inbox.OpenDB(%q), which sets a busy timeout, WAL and immediate write transactions; "+
		"or with sql.Open(\"sqlite\", %q)",
		"sqlite://"+file, SQLiteFileDSN(file))
}

// SQLiteFile answers the file of a SQLite pool's main database, "" for one
// in memory.
func SQLiteFile(ctx context.Context, db *sql.DB) (string, error) {
	var file string
	err := db.QueryRowContext(ctx, "SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&file)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return file, err
}

// SQLiteFileDSN is the modernc.org/sqlite DSN of a file with the settings
// SQLiteDSN gives every pool it opens.
func SQLiteFileDSN(path string) string {
	return fmt.Sprintf("file:%s?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate", path, SQLiteBusyTimeoutMillis)
}

func (d *Dialect) String() string { return d.Kind.String() }

// Rebind turns the $1, $2 ... placeholders the shared statements are written
// with into the engine's own: unchanged on Postgres, ?1, ?2 ... on SQLite,
// ? on MySQL, which numbers none: there the arguments must follow the
// placeholders in the text, each as often as it appears (see Bind).
func (d *Dialect) Rebind(query string) string {
	switch d.Kind {
	case SQLite:
		return dollar.ReplaceAllString(query, "?$1")
	case MySQL:
		return dollar.ReplaceAllString(query, "?")
	}
	return query
}

// Bind is Rebind with the arguments, given in the order the $n number
// them, put in the order the engine takes them.
func (d *Dialect) Bind(query string, args ...any) (string, []any) {
	if d.Kind != MySQL {
		return d.Rebind(query), args
	}
	return d.Rebind(query), reorder(placeOrder(query), args)
}

// placeOrder lists the parameter number of each $n in query, in text order.
func placeOrder(query string) []int {
	var order []int
	for _, m := range dollar.FindAllStringSubmatch(query, -1) {
		n, _ := strconv.Atoi(m[1])
		order = append(order, n)
	}
	return order
}

// reorder puts args (numbered from 1) in order; nil order keeps them.
func reorder(order []int, args []any) []any {
	if order == nil {
		return args
	}
	out := make([]any, len(order))
	for i, n := range order {
		if n-1 < len(args) {
			out[i] = args[n-1]
		}
	}
	return out
}

var dollar = regexp.MustCompile(`\$(\d+)`)

// SkipLocked is the locking clause of a claim's inner select: SQLite has one
// writer at a time and needs none. MariaDB has it from 10.6, MySQL from 8.0.
func (d *Dialect) SkipLocked() string {
	if d.Kind != SQLite {
		return " FOR UPDATE SKIP LOCKED"
	}
	return ""
}

// InList writes "col = ANY($n)" on Postgres; SQLite and MySQL have no
// arrays, so they take a JSON array and read it with json_each or
// JSON_TABLE.
func (d *Dialect) InList(col string, n int) string {
	switch d.Kind {
	case Postgres:
		return fmt.Sprintf("%s = ANY($%d)", col, n)
	case MySQL:
		return fmt.Sprintf("%s IN (SELECT value FROM JSON_TABLE($%d, '$[*]' COLUMNS (value BIGINT PATH '$')) AS j)", col, n)
	}
	return fmt.Sprintf("%s IN (SELECT value FROM json_each($%d))", col, n)
}

// ListArg encodes ids for InList.
func (d *Dialect) ListArg(ids []int64) any {
	if d.Kind == Postgres {
		return ids
	}
	var b strings.Builder
	b.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, id)
	}
	b.WriteByte(']')
	return b.String()
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// MaxIdent is the longest identifier accepted (Postgres truncates at 63
// bytes; MySQL refuses more than 64 characters).
const MaxIdent = 63

// ErrIdent marks a name refused as an identifier.
var ErrIdent = errors.New("invalid identifier")

// CheckIdent accepts a plain identifier: a letter or underscore, then
// letters, digits and underscores, at most MaxIdent bytes. Anything else is
// refused before it can reach SQL.
func CheckIdent(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty name", ErrIdent)
	}
	if len(name) > MaxIdent {
		return fmt.Errorf("%w: %q is longer than %d bytes", ErrIdent, name, MaxIdent)
	}
	if !identRE.MatchString(name) {
		return fmt.Errorf("%w: %q may hold only letters, digits and underscores, and must not start with a digit", ErrIdent, name)
	}
	return nil
}

// CheckTableName accepts an identifier, or schema.identifier.
func CheckTableName(name string) error {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return fmt.Errorf("%w: %q has more than one dot; write table or schema.table", ErrIdent, name)
	}
	for _, p := range parts {
		if err := CheckIdent(p); err != nil {
			return err
		}
	}
	return nil
}

// Quote quotes a checked identifier, or schema.identifier, part by part,
// in double quotes as SQLite and Postgres take them (see Dialect.Quote).
func Quote(name string) string { return quoteWith(name, `"`) }

// Quote quotes a checked identifier as the engine takes it: in backticks on
// MySQL, where double quotes write a string unless the session's sql_mode
// has ANSI_QUOTES.
func (d *Dialect) Quote(name string) string {
	if d.Kind == MySQL {
		return quoteWith(name, "`")
	}
	return Quote(name)
}

func quoteWith(name, q string) string {
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = q + p + q
	}
	return strings.Join(parts, ".")
}

// Savepoint marks a point inside a transaction that RollbackTo undoes the
// writes after; name is a constant identifier. Every engine writes both
// alike.
func Savepoint(name string) string { return "SAVEPOINT " + name }

// RollbackTo undoes a transaction's writes after Savepoint(name).
func RollbackTo(name string) string { return "ROLLBACK TO SAVEPOINT " + name }
