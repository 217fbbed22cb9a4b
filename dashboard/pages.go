package dashboard

import (
	"context"
	"encoding/hex"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/lock"
	"github.com/sqlinbox/sqlinbox/schedule"
)

// page is what every template gets.
type page struct {
	Title, Dialect, CSRF, Flash   string
	FlashBad, ReadOnly            bool
	RefreshMillis, RefreshSeconds int64
	Queues                        []queueView
	QueuesErr                     string
	Instances                     []inbox.Instance
	Queue                         queueView
	Rows                          []rowView
	States                        []string
	State, SearchID, Next         string
	Done                          doneSearch // the search of done rows (state done)
	PageSize                      int
	Searched                      bool // the page stopped at SearchedTo before it filled
	SearchedTo                    int64
	Err                           string
	Places                        []lock.Place
	Schedules                     schedule.Status
	// NoRegistry: the database has no registry tables yet; the page says
	// how to create them instead of showing the error.
	NoRegistry bool
	Placements []string     // the placements a schedule may be given
	Row        *rowDetail   // the row page's row
	Confirm    *confirmView // the confirmation a bulk action asks for
	// Limits: the limits per key the queue's table's rows take slots of,
	// a row per key value with slots held (one with Key "-" for a limit
	// with none); LimitsErr why they could not be read.
	Limits    []limitRow
	LimitsErr string
}

type limitRow struct {
	Limit, Column, N, Key string
	Held, Expired         int
	Waiting               string // "3", "3+" where the count stopped
}

type queueView struct {
	Table, Group, Name, Link, Oldest, Err string
	Query                                 string // table and group as a query, for links
	State                                 inbox.QueueState
	Instances, Workers                    int
	Paused                                bool
	Chart                                 template.HTML
}

type rowView struct {
	ID                                            int64
	Attempts                                      int64
	State, Due, LastError, Created, Payload, Link string
}

var states = []string{inbox.StateAvailable, inbox.StateHeld, inbox.StateDelayed, inbox.StateWaiting, inbox.StateParked, inbox.StateDone}

func (h *Handler) page(w http.ResponseWriter, r *http.Request, title string) *page {
	p := &page{Title: title, Dialect: h.dialect, ReadOnly: h.cfg.ReadOnly, CSRF: token(w, r),
		RefreshMillis: h.cfg.Refresh.Milliseconds(), RefreshSeconds: int64(h.cfg.Refresh / time.Second), States: states}
	p.Flash, p.FlashBad = takeFlash(w, r)
	return p
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	p := h.page(w, r, "Queues")
	queues, err := h.op.Queues(ctx)
	if h.missingRegistry(err) {
		p.NoRegistry = true
		h.render(w, "overview", p)
		return
	}
	if err != nil {
		p.QueuesErr = err.Error()
		h.cfg.Logger.Warn("dashboard: list queues", "err", err)
	}
	now := time.Now()
	for _, q := range queues {
		p.Queues = append(p.Queues, h.view(ctx, q, now, 180, 28))
	}
	if p.Instances, err = h.op.Instances(ctx); err != nil && p.QueuesErr == "" {
		p.QueuesErr = err.Error()
	}
	h.render(w, "overview", p)
}

// view is one queue as the pages show it.
func (h *Handler) view(ctx context.Context, q inbox.QueueInfo, now time.Time, w, ht int) queueView {
	v := queueView{Table: q.Table, Group: q.Group, Name: queueName(q.Table, q.Group), State: q.State,
		Instances: q.Instances, Workers: q.Workers, Paused: q.Paused, Oldest: "—"}
	v.Query = queueQuery(q.Table, q.Group).Encode()
	v.Link = "queue?" + v.Query
	if q.StateErr != nil {
		v.Err = q.StateErr.Error()
	}
	if !q.State.Oldest.IsZero() && q.State.Available > 0 {
		v.Oldest = ago(q.State.Oldest)
	}
	mins, err := h.op.Minutes(ctx, q.Table, q.Group, now.Add(-chartMinutes*time.Minute))
	if err != nil {
		h.cfg.Logger.Warn("dashboard: read minutes", "table", q.Table, "group", q.Group, "err", err)
	}
	v.Chart = chart(mins, now, w, ht)
	return v
}

func queueName(table, group string) string {
	if group == "" {
		return table
	}
	return table + "/" + group
}

func queueQuery(table, group string) url.Values {
	v := url.Values{"table": {table}}
	if group != "" {
		v.Set("group", group)
	}
	return v
}

// find returns the registered queue table/group, or ok false.
func (h *Handler) find(ctx context.Context, table, group string) (inbox.QueueInfo, bool, error) {
	ref, ok, err := h.op.Ref(ctx, table, group)
	if err != nil {
		return inbox.QueueInfo{}, false, err
	}
	paused, err := h.op.Paused(ctx)
	if err != nil {
		return inbox.QueueInfo{}, false, err
	}
	q := inbox.QueueInfo{QueueRef: ref, Paused: slices.Contains(paused, [2]string{table, group}) || slices.Contains(paused, [2]string{table, ""})}
	insts, err := h.op.Instances(ctx)
	if err != nil {
		return inbox.QueueInfo{}, false, err
	}
	// The live instances that consume it: those subscribed to it, to the
	// whole table, or (for the whole table) to one of its groups.
	for _, in := range insts {
		for _, s := range in.Subscriptions {
			if in.Alive && s.Table == table && (s.Group == group || s.Group == "" || group == "") {
				q.Instances++
				q.Workers += s.Workers
			}
		}
	}
	return q, ok || slices.Contains(paused, [2]string{table, group}), nil
}

func (h *Handler) queue(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	table, group := r.FormValue("table"), r.FormValue("group")
	q, ok := h.findOrFail(w, table, group, r)
	if !ok {
		return
	}
	p := h.page(w, r, queueName(table, group))
	q.State, q.StateErr = h.op.State(ctx, q.QueueRef)
	p.Queue = h.view(ctx, q, time.Now(), 600, 80)
	p.Limits, p.LimitsErr = h.limits(ctx, table)
	p.State, p.SearchID, p.PageSize = r.FormValue("state"), strings.TrimSpace(r.FormValue("id")), h.cfg.PageSize
	rf := inbox.RowFilter{Limit: h.cfg.PageSize + 1}
	if slices.Contains(states, p.State) {
		rf.States = []string{p.State}
	}
	if p.SearchID != "" {
		id, err := strconv.ParseInt(p.SearchID, 10, 64)
		if err != nil {
			p.Flash, p.FlashBad = fmt.Sprintf("%q is not a row id", p.SearchID), true
			id = 0
		}
		rf.IDs = []int64{id}
	}
	if p.State == inbox.StateDone {
		h.doneRows(ctx, r, p, q.QueueRef, rf)
		h.render(w, "queue", p)
		return
	}
	rf.After, _ = strconv.ParseInt(r.FormValue("after"), 10, 64)
	rows, searched, err := h.rows(ctx, q.QueueRef, rf)
	if err != nil {
		p.Flash, p.FlashBad = err.Error(), true
	}
	if len(rows) > h.cfg.PageSize {
		rows = rows[:h.cfg.PageSize]
		searched = rows[len(rows)-1].ID
	}
	if searched != 0 {
		next := queueQuery(table, group)
		next.Set("after", strconv.FormatInt(searched, 10))
		if rf.States != nil {
			next.Set("state", p.State)
		}
		p.Next = "queue?" + next.Encode()
		p.Searched = len(rows) < h.cfg.PageSize
		p.SearchedTo = searched
	}
	for _, row := range rows {
		link := queueQuery(table, group)
		link.Set("id", strconv.FormatInt(row.ID, 10))
		if rf.States != nil {
			link.Set("state", p.State) // the row's page comes back to this view
		}
		p.Rows = append(p.Rows, rowView{ID: row.ID, Attempts: row.Attempts, State: row.State, Due: due(row.LockedUntil, row.State),
			LastError: row.LastError, Created: ago(row.Created), Payload: preview(row.Payload), Link: "row?" + link.Encode()})
	}
	h.render(w, "queue", p)
}

// limits reads the limits table's rows take slots of (see
// inbox.LimitUse.OnTable): n, and per key value the slots held and the rows
// waiting.
func (h *Handler) limits(ctx context.Context, table string) ([]limitRow, string) {
	ls, err := h.op.Limits(ctx)
	if err != nil {
		return nil, err.Error()
	}
	var out []limitRow
	for _, l := range ls {
		if !l.OnTable(table) {
			continue
		}
		r := limitRow{Limit: l.Name, Column: "-", N: "-", Key: "-", Waiting: "0"}
		if l.N > 0 {
			r.Column, r.N = l.Column, strconv.Itoa(l.N)
		}
		if l.Per > 0 {
			r.N += "/" + l.Per.String() // a rate's: starts per window
		}
		if len(l.Keys) == 0 {
			out = append(out, r)
		}
		for _, k := range l.Keys {
			r.Key, r.Held, r.Expired, r.Waiting = k.Key, k.Held, k.Expired, strconv.FormatInt(k.Waiting, 10)
			if l.WaitingCapped {
				r.Waiting += "+"
			}
			out = append(out, r)
		}
	}
	return out, ""
}

func (h *Handler) render(w http.ResponseWriter, name string, p *page) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := h.pages[name].ExecuteTemplate(w, "layout", p); err != nil {
		h.cfg.Logger.Error("dashboard: render", "page", name, "err", err)
	}
}

func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{"ago": ago}
	pages := map[string]*template.Template{}
	for _, name := range []string{"overview", "queue", "row", "confirm", "locks", "schedules"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// flashCookie carries an action's outcome to the page it redirects to.
const flashCookie = "sqlinbox_flash"

func setFlash(w http.ResponseWriter, msg string, bad bool) {
	if bad {
		msg = "!" + msg
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: url.QueryEscape(msg), Path: "/", MaxAge: 30, HttpOnly: true, SameSite: http.SameSiteStrictMode})
}

func takeFlash(w http.ResponseWriter, r *http.Request) (string, bool) {
	c, err := r.Cookie(flashCookie)
	if err != nil || r.Header.Get("X-Live") != "" {
		return "", false
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Path: "/", MaxAge: -1})
	msg, _ := url.QueryUnescape(c.Value)
	bad := strings.HasPrefix(msg, "!")
	return strings.TrimPrefix(msg, "!"), bad
}

// ago says how long ago (or in how long) t is, to the second.
func ago(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	d := time.Since(t).Round(time.Second)
	switch {
	case d > 0:
		return d.String() + " ago"
	case d < 0:
		return "in " + (-d).String()
	}
	return "now"
}

func due(lockedUntil time.Time, state string) string {
	switch state {
	case inbox.StateParked:
		return "never (parked)"
	case inbox.StateWaiting:
		return "after its parents (waiting)"
	case inbox.StateAvailable:
		return "now"
	}
	return ago(lockedUntil)
}

// previewBytes bounds a payload's preview.
const previewBytes = 300

// preview shows a payload as text when it is printable UTF-8, else as hex;
// html/template escapes whatever it holds.
func preview(p []byte) string {
	if p == nil {
		return "NULL"
	}
	cut := p[:min(len(p), previewBytes)]
	more := ""
	if len(p) > len(cut) {
		more = fmt.Sprintf("… (%d bytes)", len(p))
	}
	if utf8.Valid(cut) || utf8.Valid(cut[:max(len(cut)-3, 0)]) {
		text := strings.ToValidUTF8(string(cut), "")
		if !strings.ContainsFunc(text, func(r rune) bool { return !unicode.IsPrint(r) && r != '\n' && r != '\t' }) {
			return text + more
		}
	}
	return "hex " + hex.EncodeToString(cut[:min(len(cut), previewBytes/2)]) + more
}
