package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// changes are the actions on rows, and the states each one acts on (see
// inbox.Operator's Unpark, RunNow and Delete).
var changes = map[string]struct {
	states []string
	verb   string // as the confirmation says it
}{
	"unpark":  {[]string{inbox.StateParked}, "Unpark"},
	"run-now": {[]string{inbox.StateDelayed}, "Run now"},
	"delete":  {[]string{inbox.StateAvailable, inbox.StateDelayed, inbox.StateWaiting, inbox.StateParked}, "Delete"},
}

// confirmView is the page a bulk action shows before it acts: what it acts
// on, and how many rows that is now.
type confirmView struct {
	Op, Verb, ErrorContains, States, Back string
	Count                                 int64
	Capped                                bool
	Was                                   int64 // the count confirmed before, when it grew since
}

func (h *Handler) action(w http.ResponseWriter, r *http.Request) {
	if !h.acceptChange(w, r) {
		return
	}
	ctx := r.Context()
	table, group := r.PostFormValue("table"), r.PostFormValue("group")
	q, ok, err := h.find(ctx, table, group)
	if err != nil || !ok {
		http.Error(w, fmt.Sprintf("dashboard: no registered queue %q", queueName(table, group)), http.StatusNotFound)
		return
	}
	// Back to the page the user came from, with the state they had chosen.
	back := queueQuery(table, group)
	if s := r.PostFormValue("state"); slices.Contains(states, s) {
		back.Set("state", s)
	}
	msg, err := h.do(ctx, w, r, q.QueueRef, back)
	if errors.Is(err, errAsked) {
		return
	}
	if err != nil {
		msg = err.Error()
		h.cfg.Logger.Warn("dashboard: action failed", "op", r.PostFormValue("op"), "table", table, "group", group, "err", err)
	}
	setFlash(w, msg, err != nil)
	// Relative, and set by hand: http.Redirect would resolve it against the
	// path the mount's StripPrefix left, and lose the prefix.
	w.Header().Set("Location", "queue?"+back.Encode())
	w.WriteHeader(http.StatusSeeOther)
}

// errAsked: do rendered a confirmation instead of acting.
var errAsked = errors.New("confirmation asked")

// do carries out the action the form names and says what it did. A bulk
// action (every row whose last error contains a text) needs that text, and
// acts only once the user confirmed the count it would change; until then
// do renders the confirmation and returns errAsked.
func (h *Handler) do(ctx context.Context, w http.ResponseWriter, r *http.Request, ref inbox.QueueRef, back url.Values) (string, error) {
	op, table, group := r.PostFormValue("op"), ref.Table, ref.Group
	switch op {
	case "pause":
		return "paused " + queueName(table, group), h.op.Pause(ctx, table, group)
	case "resume":
		return "resumed " + queueName(table, group), h.op.Resume(ctx, table, group)
	}
	if op == "cancel" {
		return h.cancel(ctx, r, ref)
	}
	change := map[string]func(context.Context, inbox.QueueRef, inbox.Selection) (int64, error){
		"unpark": h.op.Unpark, "run-now": h.op.RunNow, "delete": h.op.Delete}[op]
	if change == nil {
		return "", fmt.Errorf("unknown action %q", op)
	}
	sel := inbox.Selection{All: r.PostFormValue("all") == "1", ErrorContains: r.PostFormValue("error_contains")}
	var err error
	if sel.IDs, err = formIDs(r); err != nil {
		return "", err
	}
	if sel.All {
		sel.IDs = nil
		if strings.TrimSpace(sel.ErrorContains) == "" {
			return "", fmt.Errorf("%s: no filter given, so nothing changed: type the text the rows' last error contains (an empty filter is not every row), or tick the rows", op)
		}
		st, err := h.op.SelectedState(ctx, ref, sel)
		if err != nil {
			return "", err
		}
		n := count(st, changes[op].states)
		confirmed, _ := strconv.ParseInt(r.PostFormValue("confirm"), 10, 64)
		switch {
		case n == 0:
			return fmt.Sprintf("%s: no %s row's last error contains %q; nothing changed", op, strings.Join(changes[op].states, ", "), sel.ErrorContains), nil
		case r.PostFormValue("confirm") == "" || n > confirmed:
			h.confirm(w, r, ref, back, op, sel.ErrorContains, n, st.Capped, confirmed)
			return "", errAsked
		}
	} else if len(sel.IDs) == 0 {
		return "", errors.New("no row selected: tick the rows first")
	}
	n, err := change(ctx, ref, sel)
	return fmt.Sprintf("%s: %d rows changed", op, n), err
}

// formIDs reads the row ids the form names.
func formIDs(r *http.Request) ([]int64, error) {
	var ids []int64
	for _, s := range r.PostForm["id"] {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a row id", s)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// cancel cancels the rows the form names (inbox.Operator.Cancel): parked
// with the cancel as their last error, their handlers told where they are
// in work.
func (h *Handler) cancel(ctx context.Context, r *http.Request, ref inbox.QueueRef) (string, error) {
	ids, err := formIDs(r)
	if err != nil {
		return "", err
	}
	if len(ids) == 0 {
		return "", errors.New("no row selected: tick the rows first")
	}
	res, err := h.op.Cancel(ctx, ref, ids, inbox.CancelOptions{Reason: "from the dashboard"})
	if err != nil {
		return "", err
	}
	msg := fmt.Sprintf("cancel: %d rows parked now, %d in work (their handlers are told; their instances park them)", res.Stopped, res.InWork)
	if len(res.Missing) > 0 {
		msg += fmt.Sprintf("; no row %v (acked or deleted)", res.Missing)
	}
	return msg, nil
}

// count sums st's rows in states.
func count(st inbox.QueueState, states []string) int64 {
	var n int64
	for _, s := range states {
		n += map[string]int64{inbox.StateAvailable: st.Available, inbox.StateHeld: st.Held, inbox.StateDelayed: st.Delayed, inbox.StateWaiting: st.Waiting, inbox.StateParked: st.Parked}[s]
	}
	return n
}

// confirm renders the question a bulk action asks: n rows (was the count
// confirmed before, when it grew since).
func (h *Handler) confirm(w http.ResponseWriter, r *http.Request, ref inbox.QueueRef, back url.Values, op, text string, n int64, capped bool, was int64) {
	p := h.page(w, r, "Confirm: "+op+" "+queueName(ref.Table, ref.Group))
	p.Queue = queueView{Table: ref.Table, Group: ref.Group, Name: queueName(ref.Table, ref.Group)}
	p.State = back.Get("state")
	p.Confirm = &confirmView{Op: op, Verb: changes[op].verb, ErrorContains: text, Count: n, Capped: capped,
		States: strings.Join(changes[op].states, ", "), Back: "queue?" + back.Encode(), Was: was}
	h.render(w, "confirm", p)
}

// missingRegistry reports whether err says the registry's tables are not
// there.
func (h *Handler) missingRegistry(err error) bool {
	return err != nil && dialect.IsMissingTable(h.d, err)
}

// findOrFail is find for a page: it answers the request itself when the
// queue is not registered or cannot be read, and says so.
func (h *Handler) findOrFail(w http.ResponseWriter, table, group string, r *http.Request) (inbox.QueueInfo, bool) {
	q, ok, err := h.find(r.Context(), table, group)
	switch {
	case h.missingRegistry(err):
		http.Error(w, "dashboard: this database has no registry yet, so no queue is registered: create it with `inbox migrate-registry --db URL` (or migrations.ApplyRegistry), then start services that call Service.Register", http.StatusNotFound)
		return q, false
	case err != nil:
		http.Error(w, "dashboard: "+err.Error(), http.StatusInternalServerError)
		return q, false
	case !ok:
		http.Error(w, fmt.Sprintf("dashboard: no registered queue %q", queueName(table, group)), http.StatusNotFound)
		return q, false
	}
	return q, true
}

// acceptChange admits a request that changes something: refused in
// read-only mode, its form parsed (1 MB at most) and its CSRF checked; on
// false it has answered the request.
func (h *Handler) acceptChange(w http.ResponseWriter, r *http.Request) bool {
	if h.cfg.ReadOnly {
		http.Error(w, "dashboard: read-only", http.StatusForbidden)
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "dashboard: "+err.Error(), http.StatusBadRequest)
		return false
	}
	if why := checkCSRF(r); why != "" {
		http.Error(w, "dashboard: "+why, http.StatusForbidden)
		return false
	}
	return true
}
