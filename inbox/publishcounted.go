package inbox

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// publishCounted writes a batch where INSERT returns no rows (MySQL 8: see
// dialect.Dialect.Returns), inside the batch's transaction. Without keys,
// where one multi-row INSERT's generated ids are consecutive
// (dialect.ConsecutiveIDs), a chunk is one INSERT whose ids are its
// LastInsertId on by the step; with keys (a row whose key is queued is
// skipped, so the ids no longer follow the rows) or where InnoDB promises
// only rising ids, each row is an INSERT of its own, read alone.
func publishCounted[T any](d *dialect.Dialect, plan batchPlan, rows []T, fixed []any, exec execFunc) ([]returned, error) {
	if exec == nil {
		return nil, fmt.Errorf("%w: %s takes a *sql.Tx or *sqlx.Tx", ErrInvalid, d)
	}
	step, consecutive := d.ConsecutiveIDs()
	if consecutive && plan.batch.Key == "" {
		return publishConsecutive(d, plan, rows, fixed, exec, step)
	}
	var idField, keyField *field
	for i, f := range plan.fields {
		switch f.role {
		case RoleID:
			idField = &plan.fields[i]
		case RoleKey:
			keyField = &plan.fields[i]
		}
	}
	text := d.PublishMany(plan.batch, plan.times, 1)
	ids := make([]returned, 0, len(rows))
	for i := range rows {
		args := append(slices.Clip(fixed), rowValues(plan, rows[i:i+1])...)
		q, args := d.Bind(text, args...)
		res, err := exec(q, args...)
		if err != nil {
			return nil, err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			// A key already queued: keyedIDs reads its row.
			if err != nil {
				return nil, err
			}
			continue
		}
		var r returned
		v := reflect.ValueOf(&rows[i]).Elem()
		if idField != nil {
			r.id = v.FieldByIndex(idField.index).Int()
		} else if r.id, err = res.LastInsertId(); err != nil {
			return nil, err
		}
		if keyField != nil {
			if _, key := keyArg(v.FieldByIndex(keyField.index)); key != "" {
				r.key.String, r.key.Valid = key, true
			}
		}
		ids = append(ids, r)
	}
	return ids, nil
}

// publishConsecutive writes a batch without keys in chunks of one INSERT
// each, whose generated ids are the first (LastInsertId) on by step.
func publishConsecutive[T any](d *dialect.Dialect, plan batchPlan, rows []T, fixed []any, exec execFunc, step int64) ([]returned, error) {
	per := max(1, min(sqliteBatchRows, (dialect.MaxParams-len(fixed))/max(1, len(plan.fields))))
	ids := make([]returned, 0, len(rows))
	for start := 0; start < len(rows); start += per {
		chunk := rows[start:min(start+per, len(rows))]
		args := append(slices.Clip(fixed), rowValues(plan, chunk)...)
		q, args := d.Bind(d.PublishMany(plan.batch, plan.times, len(chunk)), args...)
		res, err := exec(q, args...)
		if err != nil {
			return nil, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return nil, err
		}
		if n != int64(len(chunk)) {
			return nil, fmt.Errorf("%d rows written of %d", n, len(chunk))
		}
		first, err := res.LastInsertId()
		if err != nil {
			return nil, err
		}
		for i := range chunk {
			ids = append(ids, returned{id: first + int64(i)*step})
		}
	}
	return ids, nil
}
