package lease

import (
	"testing"

	"github.com/sqlinbox/sqlinbox/internal/claim"
)

func TestDenseClaimsStartBlocks(t *testing.T) {
	ids := func(ids ...int64) []*claim.Job {
		jobs := make([]*claim.Job, len(ids))
		for i, id := range ids {
			jobs[i] = &claim.Job{ID: id}
		}
		return jobs
	}
	for _, c := range []struct {
		name  string
		jobs  []*claim.Job
		dense bool
	}{
		{"one row says nothing of the ids between rows", ids(5000), false},
		{"sparse ids a thousand apart", ids(0, 1000), false},
		{"ids a hundred apart", ids(0, 100, 200, 300), false},
		{"consecutive ids", ids(1, 2, 3, 4, 5, 6, 7, 8), true},
		{"two claimers' rows interleaved", ids(1, 3, 5, 7, 9, 11, 13, 15), true},
		{"negative ids", ids(-8, -7, -6, -5), true},
		{"more than half a block at once", ids(0, 511, 512), false},
	} {
		if got := dense(c.jobs); got != c.dense {
			t.Errorf("%s: dense = %v, want %v", c.name, got, c.dense)
		}
	}
}

// A ticket for a large claim takes a run of blocks that holds about
// ticketClaims of its claims; small claims take one block, as before.
func TestTicketBlocksFollowTheClaim(t *testing.T) {
	for _, c := range []struct {
		rows int
		want int64
	}{{1, 1}, {32, 1}, {256, 1}, {257, 2}, {1000, 4}} {
		if got := ticketBlocks(c.rows); got != c.want {
			t.Errorf("ticketBlocks(%d) = %d, want %d", c.rows, got, c.want)
		}
	}
}
