package engine

import (
	"context"

	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
)

// ClaimFunc sends one claim for up to max rows.
type ClaimFunc func(ctx context.Context, max int) ([]*contract.Job, error)

// ClaimMiddleware runs around each claim the loop sends: it calls next to
// claim, or returns without calling it to claim nothing (a paused queue),
// and may look at what came back (hooks). Middleware runs around the
// form's Claim and never stands in for the form, so every capability the
// engine reads of the form (its Traits, Held, and optional interfaces such
// as Floorer) is the form's own, whatever the list holds: a wrapper type
// embedding contract.Claimer hid the methods it did not declare.
type ClaimMiddleware func(ctx context.Context, max int, next ClaimFunc) ([]*contract.Job, error)

// chainClaims makes the claim the loop sends: mw in order around f (the
// form's Claim), the first outermost. New builds it once.
func chainClaims(f ClaimFunc, mw []ClaimMiddleware) ClaimFunc {
	for i := len(mw) - 1; i >= 0; i-- {
		m, next := mw[i], f
		f = func(ctx context.Context, max int) ([]*contract.Job, error) { return m(ctx, max, next) }
	}
	return f
}
