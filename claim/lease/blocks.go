package lease

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// blocks is where a claimer stands in the table's block sequence
// (migrations.ApplyClaimBlocks). Many processes claiming from the front of
// one table meet there: each walks the rows the others just leased, and a row
// it locks to recheck holds up its owner's ack until it commits. So while a
// backlog lasts each claimer takes the next block of dialect.BlockIDs ids
// from the sequence and claims inside it until it runs dry. Blocks go out in
// id order, so rows still go out about in the order they came. The blocks
// only keep claimers apart; what keeps a row in one claim is the claim's own
// lock and lease, as without them.
//
// Rows behind the block (a lease run out, a retry come due, the rest of
// the block of a claimer that stopped) are looked for each Rescan, as with
// the mark: a claim from the floor up to the block. While those claims
// come back full the claims stay behind the block, resuming at the mark,
// for up to behindRuns claims a Rescan: the blocks of slower claimers are
// behind too, and a claimer that stayed until it came back short would
// claim through them against their owners.
//
// A ticket that fails (the sequence dropped, no right to it) turns the
// blocks off for DeepRescans Rescans; the claim goes on without them.
// Claims of one claimer may run side by side (Traits.SideBySide): each
// takes a blocks of its own for its run (see lanes), so two claims in
// flight claim in blocks apart as two claimers do, and only that claim's
// goroutine touches it meanwhile.
type blocks struct {
	on     bool  // claims take blocks: a backlog was met
	behind int   // claims behind the block still to go in this Rescan
	least  int64 // the least block the next ticket may be
	lo, hi int64 // the block: ids lo up to below hi (none while hi <= lo)
	pos    int64 // where the next claim in the block starts

	offUntil time.Time // a ticket failed: no blocks before then
}

// behindRuns is how many claims behind its block a claimer sends in a
// Rescan at most, while they come back full: with one survivor of 8
// workers (claims of 32 rows), the rest of a stopped claimer's block (up
// to BlockIDs rows) is taken within seven Rescans.
const behindRuns = 5

// blocksAllowed says whether claims may take blocks at now: the table has a block
// sequence (and no priority column), the subscription takes all of it, and
// no ticket failed lately.
func (c *claimer) blocksAllowed(b *blocks, now time.Time) bool {
	e := &c.env
	return e.SQL.Ticket.SQL() != "" && e.Group == nil && e.Rescan > 0 && !now.Before(b.offUntil)
}

// lanes keeps the blocks of the claims of one claimer: a claim takes one
// for its run and puts it back. One claim at a time always gets the same
// one back; a second claim in flight beside it gets one of its own.
type lanes struct {
	mu   sync.Mutex
	free []*blocks
}

func (l *lanes) take() *blocks {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.free); n > 0 {
		b := l.free[n-1]
		l.free = l.free[:n-1]
		return b
	}
	return &blocks{}
}

func (l *lanes) put(b *blocks) {
	l.mu.Lock()
	l.free = append(l.free, b)
	l.mu.Unlock()
}

// after notes a claim from the floor or the mark: a full one whose rows are
// dense starts the claims in blocks at the block of its least id. Dense
// means at least two rows (one row spans no ids and says nothing of the
// ids between rows), lying within half a block, close enough that a block
// would hold minBlockRows rows like them. Sparser rows would take a block
// or more a claim, each with its ticket.
func (b *blocks) after(allowed, full bool, jobs []*claim.Job) {
	if !allowed || !full || b.on || !dense(jobs) {
		return
	}
	lo, _ := span(jobs)
	*b = blocks{on: true, least: floorDiv(lo, dialect.BlockIDs), offUntil: b.offUntil}
}

// claim takes up to max rows from id from on, without blocks.
func (c *claimer) claim(ctx context.Context, now time.Time, max int, from int64) ([]*claim.Job, error) {
	e := &c.env
	return c.run(ctx, max, e.SQL.ClaimLease.Call(now, e.Lease, max, e.Group, from))
}

// claimBehind takes up to max rows from id from on below the block, and
// the rest from the block when there were fewer. rescan says it is the
// Rescan's first.
func (c *claimer) claimBehind(ctx context.Context, b *blocks, now time.Time, max int, from int64, rescan bool) ([]*claim.Job, error) {
	e := &c.env
	if rescan {
		b.behind = behindRuns
	}
	b.behind--
	jobs, err := c.run(ctx, max, e.SQL.ClaimBlock.Call(now, e.Lease, max, e.Group, from, b.lo))
	if err != nil || len(jobs) == max {
		return jobs, err
	}
	b.behind = 0
	more, err := c.claimBlocks(ctx, b, now, max-len(jobs))
	return append(jobs, more...), err
}

// claimBlocks takes up to max rows from the claimer's block and, when that
// runs dry, from a new one. When the new one comes back short too, the
// backlog may be over: claims go back to the floor and the mark, and the
// rest is claimed from the floor at once.
func (c *claimer) claimBlocks(ctx context.Context, b *blocks, now time.Time, max int) ([]*claim.Job, error) {
	e := &c.env
	var jobs []*claim.Job
	for fresh := false; !fresh; {
		if b.pos >= b.hi {
			if !c.ticket(ctx, b, now, ticketBlocks(max)) {
				break
			}
			fresh = true
		}
		want := max - len(jobs)
		got, err := c.run(ctx, want, e.SQL.ClaimBlock.Call(now, e.Lease, want, e.Group, b.pos, b.hi))
		jobs = append(jobs, got...)
		if err != nil {
			return jobs, err
		}
		if len(got) == want {
			// As the mark: rows it passed over, locked by a claim in
			// flight, are looked at again.
			b.pos, _ = span(got)
			return jobs, nil
		}
		b.pos = b.hi
	}
	b.on = false
	got, err := c.claim(ctx, now, max-len(jobs), c.mark.Floor())
	return append(jobs, got...), err
}

// ticket takes the next run of n blocks from the table's block sequence,
// and says whether it got one.
func (c *claimer) ticket(ctx context.Context, b *blocks, now time.Time, n int64) bool {
	e := &c.env
	var t int64
	q := e.SQL.Ticket.Call(b.least, n)
	err := e.DB.QueryRowContext(ctx, q.SQL, q.Args...).Scan(&t)
	if err != nil || t > math.MaxInt64/dialect.BlockIDs-n || t < math.MinInt64/dialect.BlockIDs {
		// No block (or one whose ids overflow): claims go on without.
		b.offUntil = now.Add(claim.DeepRescans * e.Rescan)
		return false
	}
	b.lo, b.hi = t*dialect.BlockIDs, (t+n)*dialect.BlockIDs
	b.pos, b.least = b.lo, t+n
	return true
}

// ticketClaims is how many claims of the size of the one that takes a
// ticket its run of blocks holds (where ids are dense): a claim that
// outruns its blocks sends two claim statements and the ticket between
// them, three round trips, and claims of 1000 rows met that at nearly
// every claim in blocks of BlockIDs ids (45 ms a claim at 5 ms each way,
// against 15 ms for one statement).
const ticketClaims = 4

// ticketBlocks is how many blocks a ticket for a claim of rows takes:
// one for claims of up to a quarter block, as before.
func ticketBlocks(rows int) int64 {
	return int64(max(1, (ticketClaims*rows+dialect.BlockIDs-1)/dialect.BlockIDs))
}

// minBlockRows is the fewest rows a block must be expected to hold for its
// ticket to be worth a statement.
const minBlockRows = 64

// dense says whether the ids of jobs lie close enough for claims in blocks.
func dense(jobs []*claim.Job) bool {
	n := int64(len(jobs))
	if n < 2 {
		return false
	}
	lo, hi := span(jobs)
	ids := hi - lo + 1
	return ids <= dialect.BlockIDs/2 && ids*minBlockRows <= n*dialect.BlockIDs
}

// floorDiv is a/n rounded down (ids may be negative).
func floorDiv(a, n int64) int64 {
	q := a / n
	if a%n < 0 {
		q--
	}
	return q
}

// span is the least and the greatest id of jobs, which is not empty.
func span(jobs []*claim.Job) (lo, hi int64) {
	lo, hi = math.MaxInt64, math.MinInt64
	for _, j := range jobs {
		lo, hi = min(lo, j.ID), max(hi, j.ID)
	}
	return lo, hi
}
