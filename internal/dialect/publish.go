package dialect

import "fmt"

// PublishTime is the SQL of a published row's locked_until: parameter n is
// the offset for Times.At (NULL for no delay); with the database clock,
// parameter n+1 is an absolute time encoded as the column keeps it, which
// wins when not NULL (a publish for a set time must not depend on how far
// the host's clock is from the database's).
func PublishTime(d *Dialect, tm Times, n int) string {
	at := tm.At(n)
	if !tm.InDatabase {
		return at
	}
	if d.Kind == Postgres {
		// now() + NULL is NULL on Postgres: no delay stays NULL.
		return fmt.Sprintf("COALESCE($%d::timestamptz, %s)", n+1, at)
	}
	// SQLite's time functions would turn a NULL offset into now.
	return fmt.Sprintf("CASE WHEN $%d IS NOT NULL THEN $%d WHEN $%d IS NULL THEN NULL ELSE %s END", n+1, n+1, n, at)
}
