package engine

import (
	"context"
	"slices"
	"testing"

	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
)

// floorClaimer is a form with a floor, recording its claims.
type floorClaimer struct {
	contract.Claimer
	calls *[]string
}

func (c floorClaimer) Floor() int64 { return 42 }
func (c floorClaimer) Claim(context.Context, int) ([]*contract.Job, error) {
	*c.calls = append(*c.calls, "form")
	return []*contract.Job{{ID: 1}}, nil
}

// Claim middleware runs in its list's order around the form's claim, a
// middleware that does not call next claims nothing, and the engine still
// reads the form's own floor however many middleware there are.
func TestClaimMiddlewareRunsAroundTheForm(t *testing.T) {
	var calls []string
	named := func(name string) ClaimMiddleware {
		return func(ctx context.Context, max int, next ClaimFunc) ([]*contract.Job, error) {
			calls = append(calls, name)
			return next(ctx, max)
		}
	}
	c := floorClaimer{calls: &calls}
	claimFn := chainClaims(c.Claim, []ClaimMiddleware{named("first"), named("second")})
	if jobs, err := claimFn(context.Background(), 1); err != nil || len(jobs) != 1 {
		t.Fatalf("claim through the middleware: %d jobs, %v; want the form's one", len(jobs), err)
	}
	if want := []string{"first", "second", "form"}; !slices.Equal(calls, want) {
		t.Fatalf("calls %v, want %v", calls, want)
	}
	calls = nil
	skip := func(context.Context, int, ClaimFunc) ([]*contract.Job, error) { return nil, nil }
	if jobs, _ := chainClaims(c.Claim, []ClaimMiddleware{skip, named("second")})(context.Background(), 1); len(jobs) != 0 || len(calls) != 0 {
		t.Fatalf("a middleware that did not call next: %d jobs, calls %v; want none", len(jobs), calls)
	}
	if f := floorOf(c)(); f != 42 {
		t.Fatalf("floor %d, want the form's 42", f)
	}
}
