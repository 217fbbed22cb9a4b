package dialect

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Encoding is how a table keeps a timestamp. Postgres has timestamptz;
// SQLite has no timestamp type, so each table is read once (the declared type
// of its column) and every comparison then uses one encoding.
type Encoding int

const (
	// Timestamptz is a Postgres timestamptz, kept to the microsecond.
	Timestamptz Encoding = iota + 1
	// Text is SQLite text in the fixed UTC format TextLayout, the same format
	// strftime('%Y-%m-%d %H:%M:%f') writes, so text comparison orders times.
	Text
	// UnixMillis is SQLite integer milliseconds since the Unix epoch.
	UnixMillis
	// Datetime is a MariaDB/MySQL DATETIME(6) holding UTC, kept to the
	// microsecond. DATETIME, not TIMESTAMP: it does not move with the
	// session's time zone, and it reaches past 2038 (Never is 9999).
	Datetime
)

// TextLayout is the one text format of SQLite timestamps.
const TextLayout = "2006-01-02 15:04:05.000"

// Never is the time written into a parked row: far enough that no claim
// reaches it, still a valid value in every encoding.
var Never = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// EncodingFor picks the encoding of a SQLite column from its declared type,
// following SQLite's own affinity rules: a type holding "INT" keeps integers.
func EncodingFor(k Kind, declared string) Encoding {
	switch k {
	case Postgres:
		return Timestamptz
	case MySQL:
		return Datetime
	}
	if strings.Contains(strings.ToUpper(declared), "INT") {
		return UnixMillis
	}
	return Text
}

// Times writes and reads the times of one column: as parameters taken from
// the host's (or a fake) clock, or, with the database clock, as the engine's
// own now() plus an offset passed as a parameter.
type Times struct {
	Kind       Kind
	Encoding   Encoding
	InDatabase bool
}

// Precision is the finest step the encoding keeps.
func (t Times) Precision() time.Duration {
	if t.Kind != SQLite {
		return time.Microsecond
	}
	return time.Millisecond
}

// At is the SQL of "now plus the offset in parameter n". With a host clock
// parameter n holds the time itself (see Arg) and At is just the placeholder.
func (t Times) At(n int) string {
	if !t.InDatabase {
		return fmt.Sprintf("$%d", n)
	}
	switch t.Encoding {
	case Timestamptz:
		// statement_timestamp, not now(): inside a row-lock transaction
		// now() is the claim's time, and a retry would count from it.
		return fmt.Sprintf("(statement_timestamp() + $%d::bigint * interval '1 microsecond')", n)
	case Datetime:
		// UTC_TIMESTAMP(6) is the statement's time, as statement_timestamp.
		return fmt.Sprintf("(UTC_TIMESTAMP(6) + INTERVAL $%d MICROSECOND)", n)
	case UnixMillis:
		return fmt.Sprintf("(CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) + $%d / 1000)", n)
	default:
		return fmt.Sprintf("strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', printf('%%+.3f seconds', $%d / 1000000.0))", n)
	}
}

// Arg is the parameter for At: now plus offset, encoded, or with the
// database clock the offset alone in microseconds.
func (t Times) Arg(now time.Time, offset time.Duration) any {
	if t.InDatabase {
		return offset.Microseconds()
	}
	return t.Encode(now.Add(offset))
}

// Encode writes a time as the column keeps it, truncated to its precision so
// that a value read back compares equal to the one written.
func (t Times) Encode(at time.Time) any {
	at = at.UTC().Truncate(t.Precision())
	switch t.Encoding {
	case Text:
		return at.Format(TextLayout)
	case UnixMillis:
		return at.UnixMilli()
	}
	return at
}

// Decode reads a time from what the driver returned for the column.
func (t Times) Decode(v any) (time.Time, bool, error) {
	switch x := v.(type) {
	case nil:
		return time.Time{}, false, nil
	case time.Time:
		return x.UTC(), true, nil
	case int64:
		return time.UnixMilli(x).UTC(), true, nil
	case float64:
		return time.UnixMilli(int64(x)).UTC(), true, nil
	case []byte:
		return t.Decode(string(x))
	case string:
		// A column other than locked_until (created_at) may keep text
		// beside integer leases: read what it holds.
		if n, err := strconv.ParseInt(x, 10, 64); err == nil {
			return time.UnixMilli(n).UTC(), true, nil
		}
		for _, layout := range []string{TextLayout, "2006-01-02 15:04:05.999999999", "2006-01-02 15:04:05.999999999-07:00", time.RFC3339Nano, "2006-01-02 15:04:05", "2006-01-02T15:04:05"} {
			if at, err := time.Parse(layout, x); err == nil {
				return at.UTC(), true, nil
			}
		}
		return time.Time{}, false, fmt.Errorf("timestamp %q is not in the format %q", x, TextLayout)
	}
	return time.Time{}, false, fmt.Errorf("timestamp of unexpected type %T", v)
}

// EncodingDeclared says a table keeps its times as its locked_until column
// is declared (SQLite has no timestamp type; see EncodingFor): read the
// column's declared type once per table.
func (d *Dialect) EncodingDeclared() bool { return d.Kind == SQLite }
