package inbox

import (
	"context"

	iclaim "github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/engine"
)

// decoration is what a service adds around each of its subscriptions'
// claims, handler starts and settled handlings (the registry's pause gate
// and per-minute counts, the Hooks), as ordered lists the engine runs. No
// decoration stands in for the form's claimer: the engine reads the
// form's capabilities (its floor, say) from the form itself.
type decoration struct {
	// claims run around each claim, the first outermost: the pause gate,
	// so a claim a paused queue skips is neither sent nor reported, then
	// the hooks' report.
	claims []engine.ClaimMiddleware
	// starts give the handler its context, in order (Hooks.Started).
	starts []func(*Subscription, context.Context, StartEvent) context.Context
	// observers get each settled handling, in order: the registry's
	// per-minute counts, then the hooks' Handled (Observe's function
	// comes last; see observer).
	observers []func(Event)
	// paused says the queue is paused now; nil for a service that is not
	// registered.
	paused func() bool
}

// decorate builds each subscription's decoration. Run calls it once the
// tables are checked, before any subscription starts; it replaces what an
// earlier Run built, so nothing is added twice.
func (s *Service) decorate() {
	for _, sub := range s.subs {
		var d decoration
		if r := s.reg; r != nil {
			d.claims = append(d.claims, r.gate(sub))
			d.observers = append(d.observers, func(e Event) { r.record(sub, e) })
			d.paused = func() bool { return r.paused(sub.table, sub.group) }
		}
		if hooks := s.callHooks; len(hooks) > 0 {
			d.claims = append(d.claims, sub.reportClaims(hooks))
			for _, h := range hooks {
				if f := h.Handled; f != nil {
					d.observers = append(d.observers, func(e Event) { f(sub, e) })
				}
				if h.Started != nil {
					d.starts = append(d.starts, h.Started)
				}
			}
		}
		sub.deco = d
	}
}

// observer is the one function the engine calls with each settled
// handling: the decoration's observers, then Observe's function; nil when
// there are none.
func (s *Subscription) observer() func(Event) {
	fs := s.deco.observers
	if s.cfg.observe != nil {
		fs = append(fs[:len(fs):len(fs)], s.cfg.observe)
	}
	switch len(fs) {
	case 0:
		return nil
	case 1:
		return fs[0]
	}
	return func(e Event) {
		for _, f := range fs {
			f(e)
		}
	}
}

// started runs the decoration's starts before handle, so a hook's context
// (a span, say) reaches the handler, transactional or not.
func (s *Subscription) started(handle func(context.Context, *iclaim.Job) error) func(context.Context, *iclaim.Job) error {
	starts := s.deco.starts
	if len(starts) == 0 {
		return handle
	}
	return func(ctx context.Context, j *iclaim.Job) error {
		ev := s.startEvent(j.Value)
		for _, f := range starts {
			ctx = f(s, ctx, ev)
		}
		return handle(ctx, j)
	}
}
