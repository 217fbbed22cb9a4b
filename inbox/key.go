package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// ErrDuplicate is matched (errors.Is) by the error of a publish whose key
// is already queued, or kept in the table's history (see History): nothing
// was written, and the id Publish returns is that row's. Use errors.As with
// *DuplicateError for the key.
var ErrDuplicate = errors.New("a row with this key is already queued")

// DuplicateError says which keys of a publish were already queued. Publish
// returns it with the queued row's id; PublishMany returns it beside every
// id (the queued rows' in the places of the duplicates) once the other
// rows are written.
type DuplicateError struct {
	Table string
	Keys  []string
	IDs   []int64 // the queued rows' ids, one per key
	// Handled says a key (the first, for Error's words) was found in the
	// table's history (see History): its row was handled and acked within
	// the retention, and its id is that row's.
	Handled bool
}

func (e *DuplicateError) Error() string {
	if len(e.Keys) == 1 && e.Handled {
		return fmt.Sprintf("inbox: publish to %q: key %q was handled as row %d, kept in the history: nothing written", e.Table, e.Keys[0], e.IDs[0])
	}
	if len(e.Keys) == 1 {
		return fmt.Sprintf("inbox: publish to %q: key %q is already queued as row %d: nothing written", e.Table, e.Keys[0], e.IDs[0])
	}
	return fmt.Sprintf("inbox: publish to %q: %d keys already queued (first %q, row %d): those rows not written", e.Table, len(e.Keys), e.Keys[0], e.IDs[0])
}

// Is makes errors.Is(err, ErrDuplicate) hold.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

// keyArg is the parameter of a key field: its text, or nil (NULL, no key)
// for an empty string, a nil pointer or an invalid sql.NullString.
func keyArg(v reflect.Value) (any, string) {
	switch k := v.Interface().(type) {
	case string:
		if k != "" {
			return k, k
		}
	case *string:
		if k != nil {
			return *k, *k
		}
	case sql.NullString:
		if k.Valid {
			return k.String, k.String
		}
	default:
		if v.Kind() == reflect.String && v.String() != "" {
			return v.String(), v.String()
		}
	}
	return nil, ""
}

func noRows(err error) bool { return errors.Is(err, sql.ErrNoRows) || errors.Is(err, pgx.ErrNoRows) }

// checkKey asks for the unique index a key column needs.
func checkKey(ctx context.Context, b *Broker, table string, s *shape) ([]TableProblem, error) {
	k := s.column(RoleKey)
	if k == "" {
		return nil, nil
	}
	ok, err := b.d.UniqueOn(ctx, b.db, table, k)
	if err != nil {
		return nil, fmt.Errorf("inbox: table %q: %w", table, err)
	}
	if ok {
		return nil, nil
	}
	return []TableProblem{{Column: k, Problem: "has no unique index of its own (a key names at most one queued row, and ON CONFLICT needs the index)",
		Fix: b.d.CreateIndex(table, []string{k}, true, "")}}, nil
}

// publishKeyed runs a keyed publish's insert; when its key is queued
// already it returns the queued row's id with a *DuplicateError. A queued
// row acked between the insert and the look-up frees the key: the insert is
// tried again. With a history (r not nil; the publish runs in a
// transaction), a key the history holds is a duplicate too: looked up
// after the insert, whose check of the key's unique index waited for any
// ack in flight to end, so a row moved there meanwhile is seen (see
// docs/history.md).
func publishKeyed(d *dialect.Dialect, table string, s *shape, row reflect.Value, insert dialect.Call, runInsert, queryRow func(string, ...any) scanner, r *reservation, query queryFunc, exec execFunc) (int64, error) {
	keyParam, key := keyArg(row.FieldByIndex(s.byRole[RoleKey].index))
	byKey := d.ByKey(d.Quote(table), d.Quote(s.column(RoleID)), d.Quote(s.column(RoleKey))).Call([]string{key})
	for range 3 {
		var id int64
		err := runInsert(insert.SQL, insert.Args...).Scan(&id)
		if err == nil && keyParam != nil && r != nil {
			kept, err := r.reserved(map[string]int64{key: id}, query, exec)
			if err != nil {
				return 0, fmt.Errorf("inbox: publish to %q: %w", table, err)
			}
			if hid, ok := kept[key]; ok {
				return hid, &DuplicateError{Table: table, Keys: []string{key}, IDs: []int64{hid}, Handled: true}
			}
		}
		if err == nil {
			return id, nil
		}
		if keyParam == nil || !noRows(err) {
			return 0, fmt.Errorf("inbox: publish to %q: %w", table, err)
		}
		var queued string
		err = queryRow(byKey.SQL, byKey.Args...).Scan(&id, &queued)
		if err == nil {
			return id, &DuplicateError{Table: table, Keys: []string{key}, IDs: []int64{id}}
		}
		if !noRows(err) {
			return 0, fmt.Errorf("inbox: publish to %q: look up the row of key %q: %w", table, key, err)
		}
		if r != nil { // acked since the insert: its row may be in the history
			kept, err := r.lookUp([]string{key}, query)
			if err != nil {
				return 0, fmt.Errorf("inbox: publish to %q: %w", table, err)
			}
			if hid, ok := kept[key]; ok {
				return hid, &DuplicateError{Table: table, Keys: []string{key}, IDs: []int64{hid}, Handled: true}
			}
		}
	}
	return 0, fmt.Errorf("inbox: publish to %q: key %q conflicted three times with a row gone before it could be read", table, key)
}

// keyedIDs puts the ids of a batch into the rows' order on a table with
// keys: a keyed row by its key (the row written, or the one queued before,
// read back by key), a row without a key by the order of the generated
// ids. Rows whose key was queued (before, or earlier in the batch) come
// back with a *DuplicateError beside the ids.
//
// kept holds the keys found in the history (the batch's rows of those keys
// taken back), with the history's ids; r, where the table has a history,
// looks up a key queued at the insert whose row was acked since.
func keyedIDs[T any](d *dialect.Dialect, table string, s *shape, rows []T, got []returned, query queryFunc, kept map[string]int64, r *reservation) ([]int64, error) {
	byKey := map[string]int64{}
	var plain []int64
	for _, r := range got {
		if r.key.Valid {
			byKey[r.key.String] = r.id
		} else {
			plain = append(plain, r.id)
		}
	}
	slices.Sort(plain)
	idField, keyField := s.byRole[RoleID], s.byRole[RoleKey]
	ids := make([]int64, len(rows))
	written := map[string]bool{}
	var dups []string
	var dupAt []int
	for i := range rows {
		v := reflect.ValueOf(&rows[i]).Elem()
		k, key := keyArg(v.FieldByIndex(keyField.index))
		switch {
		case k == nil && idField.generated:
			if len(plain) == 0 {
				return nil, fmt.Errorf("inbox: publish many to %q: fewer rows without a key written than given", table)
			}
			ids[i], plain = plain[0], plain[1:]
		case k == nil:
			ids[i] = v.FieldByIndex(idField.index).Int()
		default:
			id, ok := byKey[key]
			if ok && !written[key] {
				ids[i], written[key] = id, true
				continue
			}
			dups, dupAt = append(dups, key), append(dupAt, i)
		}
	}
	if len(dups) == 0 {
		return ids, nil
	}
	queued, err := lookUpKeys(d, table, s, dups, query)
	if err != nil {
		return nil, err
	}
	if r != nil {
		var gone []string
		for _, key := range dups {
			if _, ok := queued[key]; !ok && kept[key] == 0 {
				gone = append(gone, key)
			}
		}
		if len(gone) > 0 {
			more, err := r.lookUp(gone, query)
			if err != nil {
				return nil, fmt.Errorf("inbox: publish many to %q: %w", table, err)
			}
			kept = mergeKept(kept, more)
		}
	}
	e := &DuplicateError{Table: table, Keys: dups}
	for j, key := range dups {
		id, ok := byKey[key]
		if !ok {
			if id, ok = queued[key]; !ok {
				if id, ok = kept[key]; !ok {
					return nil, fmt.Errorf("inbox: publish many to %q: key %q was queued but its row is gone: publish it again", table, key)
				}
				e.Handled = e.Handled || j == 0
			}
		}
		ids[dupAt[j]] = id
		e.IDs = append(e.IDs, id)
	}
	return ids, e
}

// lookUpKeys reads the ids of the queued rows of keys.
func lookUpKeys(d *dialect.Dialect, table string, s *shape, keys []string, query queryFunc) (map[string]int64, error) {
	q := d.ByKey(d.Quote(table), d.Quote(s.column(RoleID)), d.Quote(s.column(RoleKey))).Call(keys)
	r, err := query(q.SQL, q.Args...)
	if err != nil {
		return nil, fmt.Errorf("inbox: publish many to %q: look up queued keys: %w", table, err)
	}
	defer r.Close()
	out := map[string]int64{}
	for r.Next() {
		var id int64
		var key string
		if err := r.Scan(&id, &key); err != nil {
			return nil, err
		}
		out[key] = id
	}
	return out, r.Err()
}

// claimColumn is what a claim reads for field f (see dialect.ClaimColumn).
func claimColumn(d *dialect.Dialect, f field) string {
	return dialect.ClaimColumn(d.Quote(f.column), f.role == RoleKey && f.typ.Kind() == reflect.String)
}
