package dialect

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite" // registers "sqlite"
)

// SQLiteBusyTimeoutMillis is how long a SQLite connection waits for the
// writer's lock before it reports SQLITE_BUSY.
const SQLiteBusyTimeoutMillis = 10000

// Open opens a pool for one of the URLs the library takes everywhere:
//
//	postgres://user@host:5432/db?sslmode=disable   as pgx takes it (also postgresql://)
//	sqlite:///var/lib/app/jobs.db                  an absolute path
//	sqlite://jobs.db                               a path relative to the working directory
//	sqlite://:memory:                              a fresh in-memory database shared by the pool's connections
//	sqlite://:memory:NAME                          the in-memory database NAME, shared by every pool of the process
//
// SQLite pools open write transactions with BEGIN IMMEDIATE and wait up to
// SQLiteBusyTimeoutMillis for the writer's lock; files run in WAL mode.
func Open(rawURL string) (*sql.DB, *Dialect, error) {
	switch {
	case strings.HasPrefix(rawURL, "postgres://"), strings.HasPrefix(rawURL, "postgresql://"):
		cfg, err := pgx.ParseConfig(rawURL)
		if err != nil {
			return nil, nil, fmt.Errorf("open %s: %w", redact(rawURL), err)
		}
		return stdlib.OpenDB(*cfg, stdlib.OptionShouldPing(shouldPing)), Of(Postgres), nil
	case strings.HasPrefix(rawURL, "sqlite://"):
		dsn, err := SQLiteDSN(rawURL)
		if err != nil {
			return nil, nil, err
		}
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			return nil, nil, fmt.Errorf("open %s: %w", rawURL, err)
		}
		return db, Of(SQLite), nil
	}
	return nil, nil, fmt.Errorf("unsupported database URL %q: use postgres://..., sqlite:///abs/path.db, sqlite://rel/path.db or sqlite://:memory:", redact(rawURL))
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

func randomName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// redact hides a password in a URL meant for an error message.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
