package inbox

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// CancelOptions say what becomes of the rows Cancel stops.
type CancelOptions struct {
	// Delete deletes the rows rather than park them.
	Delete bool
	// Reason is recorded in each parked row's last error, after the
	// cancel's own words ("inbox: canceled by an operator: "), and reaches
	// the handler in its context's CancelCause.
	Reason string
}

// CancelResult is what Cancel did.
type CancelResult struct {
	// Stopped counts the rows not in work, parked (or deleted) at once.
	Stopped int64
	// InWork counts the rows that were in work: their handlers' contexts
	// end with ErrCanceled on whichever registered instance runs them, and
	// that instance parks (or deletes) them.
	InWork int64
	// Missing lists the ids with no row (acked, or deleted); Cancel of a
	// row parked already (and not Delete) leaves it as it is, in no count.
	Missing []int64
}

// Cancel stops ref's rows ids wherever they are. A row in work on a
// registered instance (Service.Register) has its handler's context end
// with ErrCanceled (the cause a *CancelCause) within about a second:
// at once where the instance's broker listens for notifications
// (ListenNotify) or shares this process, else at the instance's cancel
// poll (RegistryCancelPoll). That instance then parks the row, with the
// cancel as its last error, or deletes it where opts.Delete, whatever the
// handler returns, fenced on its own claim: a cancel never parks a row a
// later claim holds. A row not in work (available, delayed, or waiting
// for its parents) is parked (or deleted, with its edges as child) at once.
//
// The request is recorded in the registry (migrations.ApplyRegistry), so
// an instance that polls sees it, and a row whose holder died is
// canceled by the instance that claims it next. It lasts until the row is
// parked or deleted; Unpark clears the requests of the table's parked rows.
// A row an advisory handler holds keeps the locked_until it had, so it
// looks available: it is parked (or deleted) at once, and its handler's
// context ends all the same.
func (o *Operator) Cancel(ctx context.Context, ref QueueRef, ids []int64, opts CancelOptions) (CancelResult, error) {
	if len(ids) == 0 {
		return CancelResult{}, errors.New("inbox: cancel: name the rows to cancel by id")
	}
	t, err := o.adminTable(ctx, ref)
	if err != nil {
		return CancelResult{}, err
	}
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	rows, err := o.list(ctx, ref, t, RowFilter{IDs: ids, Limit: len(ids)}, nil)
	if err != nil {
		return CancelResult{}, err
	}
	var res CancelResult
	var targets []int64
	for _, id := range ids {
		i := slices.IndexFunc(rows, func(r Row) bool { return r.ID == id })
		switch {
		case i < 0:
			res.Missing = append(res.Missing, id)
		case rows[i].State != StateParked || opts.Delete:
			targets = append(targets, id)
		}
	}
	if len(targets) == 0 {
		return res, nil
	}
	if err := o.requestCancels(ctx, ref, t, targets, opts); err != nil {
		return res, err
	}
	// Rows not in work stop here. A row an advisory handler holds keeps
	// the locked_until it had, so it may be among them: its request stays
	// for its holder to see, unless no advisory subscription reads the
	// table.
	n, err := o.stopIdle(ctx, ref, t, targets, opts)
	if err != nil {
		return res, err
	}
	res.Stopped, res.InWork = n, max(int64(len(targets))-n, 0)
	if n > 0 && !o.advisoryReads(ctx, ref.Table) {
		_ = o.pruneCancels(ctx, t, ref.Table)
	}
	return res, nil
}

// requestCancels records the requests to cancel ids (first pruning the
// table's requests whose rows are gone or parked) and announces them.
func (o *Operator) requestCancels(ctx context.Context, ref QueueRef, t dialect.AdminTable, ids []int64, opts CancelOptions) error {
	action := dialect.CancelPark
	if opts.Delete {
		action = dialect.CancelDelete
	}
	cs, now := o.b.d.Cancels(), o.b.clock.Now()
	err := o.b.write(ctx, true, func(ex execer) error {
		calls := []dialect.Call{o.b.d.PruneCancels(t).Call(ref.Table)}
		for _, id := range ids {
			calls = append(calls, cs.Request.Call(ref.Table, id, action, opts.Reason, now))
		}
		return execAll(ctx, ex, calls...)
	})
	if err != nil {
		return fmt.Errorf("inbox: cancel rows of %q: record the request: %w (did migrations.ApplyRegistry run?)", ref.Table, err)
	}
	o.wake(ctx, dialect.CancelChannel, "")
	return nil
}

// stopIdle parks (or deletes) those of ids that are not in work, and
// returns how many it changed.
func (o *Operator) stopIdle(ctx context.Context, ref QueueRef, t dialect.AdminTable, ids []int64, opts CancelOptions) (int64, error) {
	f := o.filter(ref)
	// A waiting row is not in work either: it waits for its parents.
	f.IDs, f.States = ids, []string{StateAvailable, StateDelayed, StateWaiting}
	var q dialect.Call
	var err error
	if opts.Delete {
		f.States = append(f.States, StateParked)
		q, err = o.b.d.ChangeRows(t, f, dialect.ChangeDelete)
	} else {
		q, err = o.b.d.ParkRows(t, f, (&CancelCause{Reason: opts.Reason}).Error())
	}
	if err != nil {
		return 0, fmt.Errorf("inbox: cancel rows of %q: %w", ref.Table, err)
	}
	n, err := o.changed(ctx, q)
	if err != nil {
		return 0, fmt.Errorf("inbox: cancel rows of %q: %w", ref.Table, err)
	}
	if n > 0 && opts.Delete {
		if err := o.pruneDeps(ctx, t); err != nil {
			return n, fmt.Errorf("inbox: cancel rows of %q: %d deleted; delete their edges in %s: %w", ref.Table, n, dialect.DepsName(ref.Table), err)
		}
	}
	return n, nil
}

// pruneCancels deletes the cancel requests of table whose rows are gone
// or parked. A database without the registry has none.
func (o *Operator) pruneCancels(ctx context.Context, t dialect.AdminTable, table string) error {
	return o.prune(ctx, o.b.d.PruneCancels(t).Call(table))
}

// advisoryReads says whether a registered subscription of the advisory form
// reads table (or the registry cannot say).
func (o *Operator) advisoryReads(ctx context.Context, table string) bool {
	insts, err := o.Instances(ctx)
	if err != nil {
		return true
	}
	for _, in := range insts {
		for _, s := range in.Subscriptions {
			if s.Table == table && s.Form == "advisory" {
				return true
			}
		}
	}
	return false
}

// pruneDeps deletes the edges of t whose child is gone (none when t has no
// table of edges).
func (o *Operator) pruneDeps(ctx context.Context, t dialect.AdminTable) error {
	return o.prune(ctx, o.b.d.PruneDeps(t))
}

// prune runs q, a delete of what a table left behind: nothing when the
// table q deletes from does not exist.
func (o *Operator) prune(ctx context.Context, q dialect.Call) error {
	err := o.b.write(ctx, false, func(ex execer) error {
		_, err := ex.ExecContext(ctx, q.SQL, q.Args...)
		return err
	})
	if dialect.IsMissingTable(o.b.d, err) {
		return nil
	}
	return err
}
