package engine

import (
	"context"

	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
)

// Adopt takes jobs the claimer adopted (contract.Adopter) once their
// transaction committed: they pass the claim middleware as a claim's rows
// do, then wait among the spare rows for the next worker to finish, which
// is the one whose handler made them when it is called from a handler. A
// job that cannot start so (the subscription stopping, paused, or not
// running) is given back.
func (e *Engine) Adopt(ctx context.Context, jobs []*contract.Job) {
	a, ok := e.cfg.Claimer.(contract.Adopter)
	if !ok || len(jobs) == 0 {
		return
	}
	called := false
	claim := chainClaims(func(context.Context, int) ([]*contract.Job, error) {
		called = true
		a.Adopted(jobs)
		return jobs, nil
	}, e.cfg.ClaimMiddleware)
	got, err := claim(ctx, len(jobs))
	if !called {
		a.Adopted(jobs) // a paused queue's middleware claims nothing
		got = jobs
	}
	e.stats.claimed.Add(int64(len(got)))
	w := e.running.Load()
	if called && err == nil && w != nil && w.spare.adopt(got, e.cfg.Clock.Now()) {
		signal(w.changed)
		return
	}
	for _, j := range got {
		e.release(context.WithoutCancel(ctx), j)
	}
}
