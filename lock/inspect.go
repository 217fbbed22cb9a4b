package lock

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// Place is one held place of a lock in the SQL store's table, as an
// operator sees it (the dashboard's locks page).
type Place struct {
	Namespace, Name string
	Slot            int   // the place, below the lock's MaxHolders
	Fence           int64 // the hold's fencing number
	Expires         time.Time
}

// Places lists the places held now in the SQL store's table on db (at most
// 1000, by namespace, name and place). Tokens are not read: the list cannot
// be used to release another's hold.
func Places(ctx context.Context, db *sql.DB) ([]Place, error) {
	d, err := dialect.Detect(db)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	q := d.LockPlaces().Call(time.Now())
	rows, err := db.QueryContext(ctx, q.SQL, q.Args...)
	if err != nil {
		return nil, fmt.Errorf("lock: list the held places of %s: %w (did migrations.ApplyLocks run?)", dialect.LockTable, err)
	}
	defer rows.Close()
	var out []Place
	for rows.Next() {
		var p Place
		var expires any
		if err := rows.Scan(&p.Namespace, &p.Name, &p.Slot, &p.Fence, &expires); err != nil {
			return nil, fmt.Errorf("lock: list the held places of %s: %w", dialect.LockTable, err)
		}
		switch x := expires.(type) {
		case time.Time:
			p.Expires = x
		case int64:
			p.Expires = time.UnixMilli(x)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}
