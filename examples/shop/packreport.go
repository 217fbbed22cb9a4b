package main

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// String is the line a server prints for one run of pack_orders.
func (p Packing) String() string {
	var b strings.Builder
	r := p.Run
	fmt.Fprintf(&b, "%s at %s: worker %d of %d (runner %d of %d", r.Schedule, r.FiredAt.Format(time.TimeOnly), r.Worker, r.Workers, r.Runner, r.Runners)
	if r.DealtTo != r.InstanceName {
		fmt.Fprintf(&b, ", taken over from %s", r.DealtTo)
	}
	fmt.Fprintf(&b, "): packed %v", orNone(p.Packed))
	if len(p.Busy) > 0 {
		fmt.Fprintf(&b, ", left %v (locked elsewhere)", p.Busy)
	}
	if p.Err != nil {
		fmt.Fprintf(&b, ", failed: %v", p.Err)
	}
	return b.String()
}

func orNone(ids []int64) any {
	if len(ids) == 0 {
		return "nothing"
	}
	return ids
}

// countingPacker counts the packs of each order, to show none was packed
// twice.
type countingPacker struct {
	next Packer

	mu    sync.Mutex
	packs map[int64]int
}

func (c *countingPacker) Pack(ctx context.Context, order int64) error {
	c.mu.Lock()
	if c.packs == nil {
		c.packs = map[int64]int{}
	}
	c.packs[order]++
	c.mu.Unlock()
	return c.next.Pack(ctx, order)
}

// twice returns the orders packed more than once.
func (c *countingPacker) twice() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int64
	for o, n := range c.packs {
		if n > 1 {
			out = append(out, o)
		}
	}
	slices.Sort(out)
	return out
}

// total returns how many packs ran.
func (c *countingPacker) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, k := range c.packs {
		n += k
	}
	return n
}

// packState is the orders table in figures.
type packState struct {
	Paid, Unpaid int
	// Waiting are paid orders not packed yet; UnpaidPacked should stay 0.
	Waiting, UnpaidPacked int
	// By counts the packed orders of each instance.
	By map[string]int
}

func readPackState(ctx context.Context, db *sql.DB) (packState, error) {
	st := packState{By: map[string]int{}}
	rows, err := db.QueryContext(ctx, `SELECT paid, packed_by FROM shop_orders`)
	if err != nil {
		return st, fmt.Errorf("shop: read shop_orders: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var paid bool
		var by sql.NullString
		if err := rows.Scan(&paid, &by); err != nil {
			return st, fmt.Errorf("shop: read shop_orders: %w", err)
		}
		switch {
		case paid && by.Valid:
			st.Paid++
			st.By[by.String]++
		case paid:
			st.Paid++
			st.Waiting++
		case by.Valid:
			st.Unpaid++
			st.UnpaidPacked++
		default:
			st.Unpaid++
		}
	}
	return st, rows.Err()
}

// awaitPacked polls the orders table until every paid order is packed,
// and returns the summary line; it fails after within, or when an unpaid
// order was packed.
func awaitPacked(ctx context.Context, db *sql.DB, names []string, within time.Duration) (string, error) {
	deadline := time.Now().Add(within)
	for {
		st, err := readPackState(ctx, db)
		if err != nil {
			return "", err
		}
		if st.Waiting == 0 {
			var by []string
			for _, name := range names {
				by = append(by, fmt.Sprintf("%d by %s", st.By[name], name))
			}
			if st.UnpaidPacked > 0 {
				return "", fmt.Errorf("pack_orders: %d unpaid orders packed", st.UnpaidPacked)
			}
			return fmt.Sprintf("pack_orders: all %d paid orders packed (%s); %d unpaid left alone",
				st.Paid, strings.Join(by, ", "), st.Unpaid-st.UnpaidPacked), nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("pack_orders: %d paid orders still unpacked after %v", st.Waiting, within)
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}
