package dialect_test

import (
	"context"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
)

// A row's state is one definition: the SQL conditions the counts run and
// StateOf, which listings and the test kit read, put every row in the same
// state, at each cut's edge too.
func TestStatesAgreeInSQLAndGo(t *testing.T) {
	for _, c := range []struct {
		name string
		url  func(testing.TB) string // skips the subtest without its database
	}{
		{"sqlite", testdb.SQLite},
		{"postgres", testdb.Postgres},
		{"mysql", testdb.MySQL},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			db := testdb.Open(t, c.url(t))
			d, err := dialect.Detect(db)
			if err != nil {
				t.Fatal(err)
			}
			decl := map[dialect.Kind]string{dialect.SQLite: "DATETIME", dialect.Postgres: "timestamptz", dialect.MySQL: "DATETIME(6)"}[d.Kind]
			if _, err := db.ExecContext(ctx, "CREATE TABLE state_jobs (id INTEGER PRIMARY KEY, locked_until "+decl+", payload TEXT)"); err != nil {
				t.Fatal(err)
			}
			tm := dialect.Times{Kind: d.Kind, Encoding: dialect.EncodingFor(d.Kind, decl)}
			now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
			horizon := now.Add(time.Minute)
			lus := []*time.Time{nil}
			for _, at := range []time.Time{now.Add(-time.Second), now, now.Add(time.Millisecond), horizon, horizon.Add(time.Millisecond), dialect.Waiting.Add(-time.Millisecond), dialect.Waiting, dialect.Never.Add(-time.Millisecond), dialect.Never} {
				lus = append(lus, &at)
			}
			want := map[string]int64{}
			for i, lu := range lus {
				var arg any
				if lu != nil {
					arg = tm.Encode(*lu)
				}
				if _, err := db.ExecContext(ctx, d.Rebind("INSERT INTO state_jobs (id, locked_until, payload) VALUES ($1, $2, 'p')"), i+1, arg); err != nil {
					t.Fatal(err)
				}
				set := lu != nil
				var at time.Time
				if set {
					at = *lu
				}
				want[dialect.StateOf(at, set, now, horizon)]++
			}
			tbl := dialect.AdminTable{Table: dialect.Table{Name: d.Quote("state_jobs"), ID: d.Quote("id"), LockedUntil: d.Quote("locked_until")}, Payload: d.Quote("payload"), Times: tm}
			count, err := d.CountStates(tbl, dialect.AdminFilter{Now: now, Horizon: horizon})
			if err != nil {
				t.Fatal(err)
			}
			q := count.Call(now, horizon, 100)
			var got [5]int64
			var oldest any
			var scanned int64
			if err := db.QueryRowContext(ctx, q.SQL, q.Args...).Scan(&got[0], &got[1], &got[2], &got[3], &got[4], &oldest, &scanned); err != nil {
				t.Fatal(err)
			}
			for i, s := range []string{dialect.StateAvailable, dialect.StateHeld, dialect.StateDelayed, dialect.StateParked, dialect.StateWaiting} {
				if got[i] != want[s] {
					t.Errorf("%s: the count says %d rows, StateOf %d (all: %v)", s, got[i], want[s], want)
				}
			}
			if want[dialect.StateAvailable] != 3 || want[dialect.StateHeld] != 2 || want[dialect.StateDelayed] != 2 || want[dialect.StateParked] != 1 || want[dialect.StateWaiting] != 2 {
				t.Errorf("StateOf put the rows in %v, want 3 available, 2 held, 2 delayed, 2 waiting, 1 parked", want)
			}
			// The inbox count (held and delayed as one) agrees too.
			inbox := d.Inbox(tbl.Table, tm).Count.Call(now, nil)
			var avail, held, parked, waiting int64
			if err := db.QueryRowContext(ctx, inbox.SQL, inbox.Args...).Scan(&avail, &held, &parked, &waiting); err != nil {
				t.Fatal(err)
			}
			if avail != want[dialect.StateAvailable] || held != want[dialect.StateHeld]+want[dialect.StateDelayed] || parked != want[dialect.StateParked] || waiting != want[dialect.StateWaiting] {
				t.Errorf("inbox count %d available, %d held, %d parked; StateOf says %v", avail, held, parked, want)
			}
			// With a floor between now and the horizon, the rows due up to
			// it are delayed (waiting out a retry), not held, alike in SQL
			// and in Go.
			floor := now.Add(time.Millisecond)
			withFloor := map[string]int64{}
			for _, lu := range lus {
				var at time.Time
				if lu != nil {
					at = *lu
				}
				withFloor[dialect.StateIn(at, lu != nil, now, floor, horizon)]++
			}
			if withFloor[dialect.StateHeld] != 1 || withFloor[dialect.StateDelayed] != 3 {
				t.Errorf("StateIn with a floor put the rows in %v, want 1 held (the horizon) and 3 delayed", withFloor)
			}
			fc, err := d.CountStates(tbl, dialect.AdminFilter{Now: now, Floor: floor, Horizon: horizon})
			if err != nil {
				t.Fatal(err)
			}
			fq := fc.Call(now, horizon, 100)
			if err := db.QueryRowContext(ctx, fq.SQL, fq.Args...).Scan(&got[0], &got[1], &got[2], &got[3], &got[4], &oldest, &scanned); err != nil {
				t.Fatal(err)
			}
			for i, s := range []string{dialect.StateAvailable, dialect.StateHeld, dialect.StateDelayed, dialect.StateParked, dialect.StateWaiting} {
				if got[i] != withFloor[s] {
					t.Errorf("with a floor, %s: the count says %d rows, StateIn %d", s, got[i], withFloor[s])
				}
			}
			for _, s := range []string{dialect.StateHeld, dialect.StateDelayed} {
				list, err := d.ListRows(tbl, dialect.AdminFilter{Now: now, Floor: floor, Horizon: horizon, States: []string{s}}, 100)
				if err != nil {
					t.Fatal(err)
				}
				rows, err := db.QueryContext(ctx, list.SQL, list.Args...)
				if err != nil {
					t.Fatalf("%v\n%s", err, list.SQL)
				}
				var n int64
				for rows.Next() {
					n++
				}
				rows.Close()
				if n != withFloor[s] {
					t.Errorf("with a floor, the %s rows listed: %d, StateIn %d", s, n, withFloor[s])
				}
			}
			// An operator's change picks rows by id and state alike: of the
			// first and last rows, only the parked one is deleted.
			del, err := d.ChangeRows(tbl, dialect.AdminFilter{Now: now, Horizon: horizon, IDs: []int64{1, int64(len(lus))}, States: []string{dialect.StateParked}}, dialect.ChangeDelete)
			if err != nil {
				t.Fatal(err)
			}
			res, err := db.ExecContext(ctx, del.SQL, del.Args...)
			if err != nil {
				t.Fatalf("%v\n%s", err, del.SQL)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Errorf("deleted %d rows, want the parked one", n)
			}
		})
	}
}
