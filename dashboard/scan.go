package dashboard

import (
	"context"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
)

// A view of one state reads the queue's key a window of scanWindow rows at
// a time, while the page is not full and scanBudget is not spent; a page
// that ran out of budget links to the rest. Without it, the parked view of
// ten million rows with a hundred parked walked the whole key (2.5 s at
// load 17), and an index on locked_until would keep claims from updating in
// place.
const (
	scanWindow = 50000
	scanBudget = 300 * time.Millisecond
)

// rows lists up to rf.Limit of ref's rows for rf. searched is the last id
// read when the budget ran out before the page filled or the queue ended,
// and zero otherwise.
func (h *Handler) rows(ctx context.Context, ref inbox.QueueRef, rf inbox.RowFilter) (rows []inbox.Row, searched int64, err error) {
	if rf.States == nil || rf.IDs != nil {
		rows, err = h.op.Rows(ctx, ref, rf)
		return rows, 0, err
	}
	want := rf.Limit
	deadline := time.Now().Add(h.cfg.scanBudget)
	for {
		page, through, err := h.op.ScanRows(ctx, ref, rf, h.cfg.scanWindow)
		rows = append(rows, page...)
		switch {
		case err != nil || through == 0 || len(rows) >= want:
			return rows, 0, err
		case time.Now().After(deadline):
			return rows, through, nil
		}
		rf.After, rf.Limit = through, want-len(rows)
	}
}
