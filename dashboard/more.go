package dashboard

import (
	"net/http"

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
	h.render(w, "schedules", p)
}
