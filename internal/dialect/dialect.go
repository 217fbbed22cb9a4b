// Package dialect holds what differs between SQLite and Postgres: how a URL
// opens a pool, placeholders, quoting, how a time is written and compared,
// SKIP LOCKED, and the text of every shared statement.
package dialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"modernc.org/sqlite"
)

// Kind names a database engine.
type Kind int

const (
	SQLite Kind = iota + 1
	Postgres
)

func (k Kind) String() string {
	switch k {
	case SQLite:
		return "sqlite"
	case Postgres:
		return "postgres"
	}
	return "unknown"
}

// Dialect is one engine's way of writing the shared statements.
type Dialect struct {
	Kind Kind
}

// Of returns the dialect of kind k.
func Of(k Kind) *Dialect { return &Dialect{Kind: k} }

// Detect tells the dialect of a pool: from the driver when it is
// modernc.org/sqlite's or pgx's own, otherwise by what the database answers
// (select version() on Postgres, select sqlite_version() on SQLite), so a
// pool opened through a wrapping driver (otelsql, sqlhooks) is served too.
// A SQLite pool must wait for the writer's lock: one whose connections have
// no busy timeout is refused (see CheckSQLitePool).
func Detect(db *sql.DB) (*Dialect, error) {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	var k Kind
	switch db.Driver().(type) {
	case *sqlite.Driver:
		k = SQLite
	case *stdlib.Driver:
		k = Postgres
	default:
		var err error
		if k, err = probe(ctx, db); err != nil {
			return nil, err
		}
	}
	if k == SQLite {
		if err := CheckSQLitePool(ctx, db); err != nil {
			return nil, err
		}
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
	liteErr := db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&v)
	if liteErr == nil {
		return SQLite, nil
	}
	answer := v
	if pgErr != nil {
		answer = "select version(): " + pgErr.Error() + "; select sqlite_version(): " + liteErr.Error()
	}
	return 0, fmt.Errorf("driver %T: could not tell SQLite or Postgres from what its database answers (%s): use modernc.org/sqlite or github.com/jackc/pgx/v5/stdlib, or a wrapper of either", db.Driver(), answer)
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
	var seq int
	var name, file string
	_ = db.QueryRowContext(ctx, "SELECT seq, name, file FROM pragma_database_list WHERE name = 'main'").Scan(&seq, &name, &file)
	if file == "" {
		file = "/path/to/app.db"
	}
	return fmt.Errorf("sqlite pool has no busy timeout (PRAGMA busy_timeout is 0): its statements would fail with SQLITE_BUSY whenever another connection writes. "+
		"Open it with inbox.OpenDB(%q), which sets a busy timeout, WAL and immediate write transactions; "+
		"or with sql.Open(\"sqlite\", %q)",
		"sqlite://"+file, SQLiteFileDSN(file))
}

// SQLiteFileDSN is the modernc.org/sqlite DSN of a file with the settings
// SQLiteDSN gives every pool it opens.
func SQLiteFileDSN(path string) string {
	return fmt.Sprintf("file:%s?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate", path, SQLiteBusyTimeoutMillis)
}

func (d *Dialect) String() string { return d.Kind.String() }

// Rebind turns the $1, $2 ... placeholders the shared statements are written
// with into the engine's own: unchanged on Postgres, ?1, ?2 ... on SQLite.
func (d *Dialect) Rebind(query string) string {
	if d.Kind != SQLite {
		return query
	}
	return dollar.ReplaceAllString(query, "?$1")
}

var dollar = regexp.MustCompile(`\$(\d+)`)

// SkipLocked is the locking clause of a claim's inner select: SQLite has one
// writer at a time and needs none.
func (d *Dialect) SkipLocked() string {
	if d.Kind == Postgres {
		return " FOR UPDATE SKIP LOCKED"
	}
	return ""
}

// InList writes "col = ANY($n)" on Postgres; SQLite has no arrays, so it
// takes a JSON array and reads it with json_each.
func (d *Dialect) InList(col string, n int) string {
	if d.Kind == Postgres {
		return fmt.Sprintf("%s = ANY($%d)", col, n)
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

// MaxIdent is the longest identifier accepted (Postgres truncates at 63 bytes).
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

// Quote quotes a checked identifier, or schema.identifier, part by part.
func Quote(name string) string {
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = `"` + p + `"`
	}
	return strings.Join(parts, ".")
}
