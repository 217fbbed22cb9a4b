package inbox

import "context"

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
	return o.countStates(ctx, ref, t, f, "the selected rows")
}
