package dashboard

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/sqlinbox/sqlinbox/lock"
	"github.com/sqlinbox/sqlinbox/schedule"
)

// locks shows the places held in the SQL lock store on the broker's database.
func (h *Handler) locks(w http.ResponseWriter, r *http.Request) {
	p := h.page(w, r, "Locks")
	places, err := lock.Places(r.Context(), h.db)
	if err != nil {
		p.Err = err.Error()
	}
	p.Places = places
	h.render(w, "locks", p)
}

// schedules shows the schedule tables: members, latest moments, open shares.
func (h *Handler) schedules(w http.ResponseWriter, r *http.Request) {
	p := h.page(w, r, "Schedules")
	st, err := schedule.Inspect(r.Context(), h.db, 50)
	if err != nil {
		p.Err = err.Error()
	}
	p.Schedules = st
	for _, pl := range []schedule.Placement{schedule.One, schedule.EveryInstance, schedule.EveryWorker} {
		p.Placements = append(p.Placements, pl.String())
	}
	h.render(w, "schedules", p)
}

// placement sets or resets a schedule's placement (schedule.SetPlacement,
// schedule.ResetPlacement) for the schedules page: a schedule the tables
// know, with the page's CSRF token, never in read-only mode.
func (h *Handler) placement(w http.ResponseWriter, r *http.Request) {
	if !h.acceptChange(w, r) {
		return
	}
	ctx := r.Context()
	name := r.PostFormValue("schedule")
	st, err := schedule.Inspect(ctx, h.db, 1)
	if err != nil || !slices.ContainsFunc(st.Schedules, func(s schedule.Summary) bool { return s.Name == name }) {
		http.Error(w, fmt.Sprintf("dashboard: no schedule %q runs on this database", name), http.StatusNotFound)
		return
	}
	var msg string
	switch r.PostFormValue("op") {
	case "set":
		var p schedule.Placement
		if p, err = schedule.ParsePlacement(r.PostFormValue("placement")); err == nil {
			err = schedule.SetPlacement(ctx, h.db, name, p)
		}
		msg = fmt.Sprintf("%s runs %s from its next moment on", name, p)
	case "reset":
		_, err = schedule.ResetPlacement(ctx, h.db, name)
		msg = name + " runs as its code places it from its next moment on"
	default:
		err = fmt.Errorf("unknown action %q", r.PostFormValue("op"))
	}
	if err != nil {
		msg = err.Error()
		h.cfg.Logger.Warn("dashboard: placement failed", "schedule", name, "err", err)
	}
	setFlash(w, msg, err != nil)
	w.Header().Set("Location", "schedules") // relative: see action
	w.WriteHeader(http.StatusSeeOther)
}
