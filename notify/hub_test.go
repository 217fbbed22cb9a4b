package notify_test

import (
	"testing"

	"github.com/sqlinbox/sqlinbox/notify"
)

func woken(w *notify.Waiter) bool {
	select {
	case <-w.C():
		return true
	default:
		return false
	}
}

func TestHubRoutesByChannelAndKey(t *testing.T) {
	h := notify.NewHub()
	all := h.Subscribe("jobs", "")
	eu := h.Subscribe("jobs", "eu")
	us := h.Subscribe("jobs", "us")
	other := h.Subscribe("mail", "")
	defer all.Close()
	defer eu.Close()
	defer us.Close()
	defer other.Close()

	h.Wake("jobs", "eu")
	if !woken(all) || !woken(eu) || woken(us) || woken(other) {
		t.Fatal("a wake of jobs/eu reached the wrong waiters")
	}
	h.Wake("jobs", "")
	if !woken(all) || !woken(eu) || !woken(us) || woken(other) {
		t.Fatal("an empty key did not wake every waiter of the channel alone")
	}
}

func TestHubCoalescesBursts(t *testing.T) {
	h := notify.NewHub()
	w := h.Subscribe("jobs", "")
	for range 1000 {
		h.Wake("jobs", "")
	}
	if !woken(w) {
		t.Fatal("no wake after a burst")
	}
	if woken(w) {
		t.Fatal("a burst left more than one pending wake")
	}
	w.Close()
	h.Wake("jobs", "")
	if woken(w) || len(h.Channels()) != 0 {
		t.Fatal("a closed waiter was still woken or still listed")
	}
}
