package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
)

// doneSearch is the search of a queue's done rows: acked and kept in its
// table's history (inbox.History).
type doneSearch struct {
	Key, Error, From, Before string // as typed: From and Before as datetime-local, UTC
}

// doneLayout is how the search's times are typed and shown: an HTML
// datetime-local, read as UTC.
const doneLayout = "2006-01-02T15:04:05"

// doneRows fills p with a page of ref's done rows, the most recently
// handled first, searched by id, key, error text and handled time.
func (h *Handler) doneRows(ctx context.Context, r *http.Request, p *page, ref inbox.QueueRef, rf inbox.RowFilter) {
	d := doneSearch{Key: strings.TrimSpace(r.FormValue("key")), Error: r.FormValue("error"), From: r.FormValue("from"), Before: r.FormValue("before")}
	p.Done = d
	rf.Key, rf.ErrorContains = d.Key, d.Error
	var err error
	if rf.HandledFrom, err = doneTime(d.From); err == nil {
		rf.HandledBefore, err = doneTime(d.Before)
	}
	if err != nil {
		p.Flash, p.FlashBad = err.Error(), true
		return
	}
	if rf.Key != "" && ref.Roles[inbox.RoleKey] == "" {
		p.Flash, p.FlashBad = fmt.Sprintf("%s has no key column registered: search its done rows by id, error or time", ref.Table), true
		return
	}
	rows, err := h.op.Rows(ctx, ref, rf)
	if err != nil {
		p.Flash, p.FlashBad = err.Error(), true
		return
	}
	if len(rows) > h.cfg.PageSize {
		rows = rows[:h.cfg.PageSize]
		next := queueQuery(ref.Table, ref.Group)
		next.Set("state", inbox.StateDone)
		for k, v := range map[string]string{"key": d.Key, "error": d.Error, "from": d.From} {
			if v != "" {
				next.Set(k, v)
			}
		}
		next.Set("before", rows[len(rows)-1].Handled.UTC().Format(time.RFC3339Nano))
		p.Next = "queue?" + next.Encode()
	}
	for _, row := range rows {
		link := queueQuery(ref.Table, ref.Group)
		link.Set("state", inbox.StateDone)
		link.Set("id", strconv.FormatInt(row.ID, 10))
		p.Rows = append(p.Rows, rowView{ID: row.ID, Attempts: row.Attempts, State: row.State,
			Due:       fmt.Sprintf("handled %s by %s in %v", ago(row.Handled), row.HandledBy, row.Took.Round(time.Microsecond)),
			LastError: row.LastError, Created: ago(row.Created), Payload: preview(row.Payload), Link: "queue?" + link.Encode()})
	}
}

// doneTime reads a search's time: a datetime-local (UTC), or RFC 3339 (a
// next page's link); "" is no bound.
func doneTime(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339Nano, doneLayout, "2006-01-02T15:04"} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a time: type it as 2026-12-05T06:00 (UTC)", v)
}
