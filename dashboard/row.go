package dashboard

import (
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/sqlinbox/sqlinbox/inbox"
)

// rowDetail is one row in full, as the row page shows it.
type rowDetail struct {
	ID, Attempts               int64
	State, Due, DueAt, Created string
	LastError, Payload, Kind   string
	Size                       int
}

// row shows one row of a queue in full: its payload, attempts, last error,
// when it is due and its state.
func (h *Handler) row(w http.ResponseWriter, r *http.Request) {
	table, group := r.FormValue("table"), r.FormValue("group")
	q, ok := h.findOrFail(w, table, group, r)
	if !ok {
		return
	}
	id, err := strconv.ParseInt(r.FormValue("id"), 10, 64)
	if err != nil {
		http.Error(w, fmt.Sprintf("dashboard: %q is not a row id", r.FormValue("id")), http.StatusBadRequest)
		return
	}
	p := h.page(w, r, fmt.Sprintf("%s #%d", queueName(table, group), id))
	if st := r.FormValue("state"); slices.Contains(states, st) {
		p.State = st
	}
	p.Queue = queueView{Table: table, Group: group, Name: queueName(table, group), Paused: q.Paused,
		Query: queueQuery(table, group).Encode(), Link: "queue?" + queueQuery(table, group).Encode()}
	rows, err := h.op.Rows(r.Context(), q.QueueRef, inbox.RowFilter{IDs: []int64{id}, Limit: 1})
	switch {
	case err != nil:
		p.Err = err.Error()
	case len(rows) == 0:
		p.Err = fmt.Sprintf("no row %d in %s: it was acked or deleted", id, queueName(table, group))
	default:
		row := rows[0]
		d := &rowDetail{ID: row.ID, Attempts: row.Attempts, State: row.State, Due: due(row.LockedUntil, row.State),
			Created: "—", LastError: row.LastError, Size: len(row.Payload)}
		if !row.LockedUntil.IsZero() && row.State != inbox.StateParked && row.State != inbox.StateWaiting {
			d.DueAt = row.LockedUntil.UTC().Format("2006-01-02 15:04:05.000 MST")
		}
		if !row.Created.IsZero() {
			d.Created = row.Created.UTC().Format("2006-01-02 15:04:05 MST") + " (" + ago(row.Created) + ")"
		}
		d.Kind, d.Payload = full(row.Payload)
		p.Row = d
	}
	h.render(w, "row", p)
}

// full shows a payload whole: as text when it is printable UTF-8, else as
// hex, sixteen bytes a line; html/template escapes it.
func full(p []byte) (kind, text string) {
	switch {
	case p == nil:
		return "NULL", ""
	case utf8.Valid(p) && !containsControl(string(p)):
		return "text", string(p)
	}
	var b []byte
	for i := 0; i < len(p); i += 16 {
		line := p[i:min(i+16, len(p))]
		b = fmt.Appendf(b, "%08x  %s\n", i, hex.EncodeToString(line))
	}
	return "hex", string(b)
}

func containsControl(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) && r != '\n' && r != '\t' && r != '\r' {
			return true
		}
	}
	return false
}
