package inbox

import (
	"context"
	"fmt"
)

// SelectedState counts, by state, ref's rows that sel picks, as State
// counts the whole queue (over at most CountLimit rows in id order, Capped
// when it stopped there). Unpark would change its Parked rows, RunNow its
// Delayed ones, Delete its Available, Delayed and Parked ones: a dashboard
// states that count before it asks to go on.
func (o *Operator) SelectedState(ctx context.Context, ref QueueRef, sel Selection) (QueueState, error) {
	if err := sel.check(); err != nil {
		return QueueState{}, err
	}
	t, err := o.adminTable(ctx, ref)
	if err != nil {
		return QueueState{}, err
	}
	f := o.filter(ref)
	f.IDs, f.ErrorContains = sel.IDs, sel.ErrorContains
	count, err := o.b.d.CountStates(t, f)
	if err != nil {
		return QueueState{}, fmt.Errorf("inbox: table %q: %w", ref.Table, err)
	}
	limit := o.CountLimit
	if limit <= 0 {
		limit = DefaultCountLimit
	}
	q := count.Call(f.Now, f.Horizon, limit)
	var st QueueState
	var oldest any
	var scanned int64
	if err := o.b.db.QueryRowContext(ctx, q.SQL, q.Args...).Scan(&st.Available, &st.Held, &st.Delayed, &st.Parked, &oldest, &scanned); err != nil {
		return QueueState{}, fmt.Errorf("inbox: count the selected rows of %q: %w", ref.Table, err)
	}
	st.Capped = scanned >= int64(limit)
	if at, ok, err := t.Times.Decode(oldest); err == nil && ok {
		st.Oldest = at
	}
	return st, nil
}
