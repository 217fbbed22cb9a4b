package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// momentPrinter prints each moment of pack_orders once all its runs, on
// every instance, have reported: one line per run with its instance, worker
// and the orders it packed.
type momentPrinter struct {
	w io.Writer

	mu      sync.Mutex
	pending map[int64][]Packing // by FiredAt in Unix nanoseconds
	done    chan struct{}       // one buffered wake per completed moment, coalesced
}

func newMomentPrinter(w io.Writer) *momentPrinter {
	return &momentPrinter{w: w, pending: map[int64][]Packing{}, done: make(chan struct{}, 1)}
}

// add is the packers' Report: it keeps a run until its moment is complete.
func (m *momentPrinter) add(p Packing) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := p.Run.FiredAt.UnixNano()
	runs := append(m.pending[key], p)
	if len(runs) < p.Run.Workers {
		m.pending[key] = runs
		return
	}
	delete(m.pending, key)
	slices.SortFunc(runs, func(a, b Packing) int { return a.Run.Worker - b.Run.Worker })
	m.print(runs)
	select {
	case m.done <- struct{}{}:
	default:
	}
}

func (m *momentPrinter) print(runs []Packing) {
	r0 := runs[0].Run
	var b strings.Builder
	fmt.Fprintf(&b, "%s at %s: %d runs on %d instances\n", r0.Schedule, r0.FiredAt.Format(time.TimeOnly), r0.Workers, r0.Instances)
	for _, p := range runs {
		fmt.Fprintf(&b, "  %s worker %d of %d: packed %v", p.Run.InstanceName, p.Run.Worker, p.Run.Workers, orNone(p.Packed))
		if len(p.Busy) > 0 {
			fmt.Fprintf(&b, ", left %v (locked elsewhere)", p.Busy)
		}
		if p.Err != nil {
			fmt.Fprintf(&b, ", failed: %v", p.Err)
		}
		b.WriteByte('\n')
	}
	io.WriteString(m.w, b.String())
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

// awaitPacked waits, moment by moment, until every paid order is packed,
// then prints the summary line; it fails after within, or when an order was
// packed twice or an unpaid one packed at all.
func awaitPacked(ctx context.Context, s *shop, moments *momentPrinter, packs *countingPacker, within time.Duration) error {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		st, err := readPackState(ctx, s.DB)
		if err != nil {
			return err
		}
		if st.Waiting == 0 {
			var by []string
			for _, name := range s.Names {
				by = append(by, fmt.Sprintf("%d by %s", st.By[name], name))
			}
			fmt.Printf("pack_orders: all %d paid orders packed, each once (%s); %d unpaid left alone\n",
				st.Paid, strings.Join(by, ", "), st.Unpaid-st.UnpaidPacked)
			if twice := packs.twice(); len(twice) > 0 || st.UnpaidPacked > 0 {
				return fmt.Errorf("pack_orders: orders packed twice: %v; unpaid orders packed: %d", twice, st.UnpaidPacked)
			}
			return nil
		}
		select {
		case <-moments.done:
		case <-deadline.C:
			return fmt.Errorf("pack_orders: %d paid orders still unpacked after %v", st.Waiting, within)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
