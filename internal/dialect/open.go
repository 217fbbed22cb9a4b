package dialect

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite" // registers "sqlite"
)

// SQLiteBusyTimeoutMillis is how long a SQLite connection waits for the
// writer's lock before it reports SQLITE_BUSY.
const SQLiteBusyTimeoutMillis = 10000

// SQLiteCacheKiB bounds the page cache of each SQLite connection a URL opens,
// in KiB (PRAGMA cache_size = -512). SQLite's own default is 2000 KiB a
// connection: a queue draining a large table reads each page once and never
// again, so every connection's cache fills with pages already drained, and
// the pool held up to 2 MB each for nothing. A claim and its acks touch a few
// pages at the front of the table and its index, well within 512 KiB, and the
// pages evicted stay in the operating system's cache. A URL that sets its own
// cache_size (?_pragma=cache_size(-N) or (N pages)) keeps it.
const SQLiteCacheKiB = 512

// Open opens a pool for one of the URLs the library takes everywhere:
//
//	postgres://user@host:5432/db?sslmode=disable   as pgx takes it (also postgresql://)
//	mysql://user:password@host:3306/db              MariaDB or MySQL (see MySQLDSN)
//	sqlite:///var/lib/app/jobs.db                  an absolute path
//	sqlite://jobs.db                               a path relative to the working directory
//	sqlite://:memory:                              a fresh in-memory database shared by the pool's connections
//	sqlite://:memory:NAME                          the in-memory database NAME, shared by every pool of the process
//
// SQLite pools open write transactions with BEGIN IMMEDIATE and wait up to
// SQLiteBusyTimeoutMillis for the writer's lock; files run in WAL mode; each
// connection's page cache is bounded to SQLiteCacheKiB unless the URL sets
// cache_size.
func Open(rawURL string) (*sql.DB, *Dialect, error) {
	switch {
	case strings.HasPrefix(rawURL, "postgres://"), strings.HasPrefix(rawURL, "postgresql://"):
		cfg, err := pgx.ParseConfig(rawURL)
		if err != nil {
			return nil, nil, fmt.Errorf("open %s: %w", redact(rawURL), err)
		}
		cfg.OnPgError = dropReadOnly(cfg.OnPgError)
		return openPostgres(rawURL, cfg), Of(Postgres), nil
	case strings.HasPrefix(rawURL, "mysql://"):
		db, err := openMySQL(rawURL)
		if err != nil {
			return nil, nil, err
		}
		return db, Of(MySQL), nil
	case strings.HasPrefix(rawURL, "sqlite://"):
		dsn, err := SQLiteDSN(rawURL)
		if err != nil {
			return nil, nil, err
		}
		if err := sqliteDirExists(rawURL); err != nil {
			return nil, nil, err
		}
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			return nil, nil, fmt.Errorf("open %s: %w", rawURL, err)
		}
		return db, Of(SQLite), nil
	}
	return nil, nil, fmt.Errorf("unsupported database URL %q: use postgres://..., mysql://user:password@host:3306/db, sqlite:///abs/path.db, sqlite://rel/path.db or sqlite://:memory:", redact(rawURL))
}

// PingIdle is how long a Postgres connection sits idle in the pool before
// it is pinged as it is taken again. pgx pings after one second, which would
// double the statements of a subscription polling every second; a broken
// connection is still found by the statement itself.
const PingIdle = 30 * time.Second

func shouldPing(_ context.Context, p stdlib.ShouldPingParams) bool {
	return p.IdleDuration > PingIdle
}

// SQLiteDSN turns a sqlite:// URL into the DSN modernc.org/sqlite takes.
func SQLiteDSN(rawURL string) (string, error) {
	rest := strings.TrimPrefix(rawURL, "sqlite://")
	path, query, _ := strings.Cut(rest, "?")
	if path == "" {
		return "", fmt.Errorf("sqlite URL %q names no file: use sqlite:///abs/path.db, sqlite://rel/path.db or sqlite://:memory:", rawURL)
	}
	params := url.Values{}
	if query != "" {
		q, err := url.ParseQuery(query)
		if err != nil {
			return "", fmt.Errorf("sqlite URL %q: %w", rawURL, err)
		}
		params = q
	}
	params.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", SQLiteBusyTimeoutMillis))
	if !setsPragma(params, "cache_size") {
		params.Add("_pragma", fmt.Sprintf("cache_size(%d)", -SQLiteCacheKiB))
	}
	params.Set("_txlock", "immediate")
	if name, ok := strings.CutPrefix(path, ":memory:"); ok {
		if name == "" {
			name = "sqlinbox-" + randomName()
		} else if err := CheckIdent(strings.ReplaceAll(name, "-", "_")); err != nil {
			return "", fmt.Errorf("sqlite URL %q: memory database name: %w", rawURL, err)
		}
		params.Set("vfs", "memdb")
		return "file:/" + name + "?" + params.Encode(), nil
	}
	params.Add("_pragma", "journal_mode(WAL)")
	params.Add("_pragma", "synchronous(NORMAL)")
	return "file:" + path + "?" + params.Encode(), nil
}

// sqliteDirExists refuses a file URL whose directory is missing: SQLite
// would say only "unable to open database file (14)", at the first
// statement, without the path.
func sqliteDirExists(rawURL string) error {
	path, _, _ := strings.Cut(strings.TrimPrefix(rawURL, "sqlite://"), "?")
	if strings.HasPrefix(path, ":memory:") {
		return nil
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case err != nil && os.IsNotExist(err):
		return fmt.Errorf("sqlite URL %q: directory %s does not exist: create it (SQLite creates the file, not its directory) or fix the path (sqlite:///abs/path.db, sqlite://rel/path.db)", rawURL, dir)
	case err != nil:
		return fmt.Errorf("sqlite URL %q: directory %s: %w", rawURL, dir, err)
	case !st.IsDir():
		return fmt.Errorf("sqlite URL %q: %s is not a directory", rawURL, dir)
	}
	return nil
}

// setsPragma reports whether the URL's own _pragma values set name, with
// or without a schema ("main.cache_size(-64)").
func setsPragma(params url.Values, name string) bool {
	for _, v := range params["_pragma"] {
		p, _, _ := strings.Cut(v, "(")
		p, _, _ = strings.Cut(p, "=")
		p = strings.TrimSpace(p)
		if i := strings.LastIndexByte(p, '.'); i >= 0 {
			p = p[i+1:]
		}
		if strings.EqualFold(p, name) {
			return true
		}
	}
	return false
}

var userinfoPassword = regexp.MustCompile(`^([a-zA-Z][a-zA-Z0-9+.-]*://[^:/@]*:)[^@]*@`)

func randomName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// redact hides a password in a URL meant for an error message, also in a
// URL too malformed to parse.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return userinfoPassword.ReplaceAllString(raw, "${1}xxxxx@")
	}
	if u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
