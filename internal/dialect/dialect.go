// Package dialect holds what differs between SQLite and Postgres: how a URL
// opens a pool, placeholders, quoting, how a time is written and compared,
// SKIP LOCKED, and the text of every shared statement.
package dialect

import (
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"

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

// Detect tells the dialect of a pool from its driver.
func Detect(db *sql.DB) (*Dialect, error) {
	switch db.Driver().(type) {
	case *sqlite.Driver:
		return Of(SQLite), nil
	case *stdlib.Driver:
		return Of(Postgres), nil
	}
	return nil, fmt.Errorf("unsupported database/sql driver %T: use modernc.org/sqlite or github.com/jackc/pgx/v5/stdlib", db.Driver())
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
