package main

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/lock"
	"github.com/sqlinbox/sqlinbox/schedule"
)

// packFunc is a Packer made of a function; nil packs at once.
type packFunc func(ctx context.Context, order int64) error

func (f packFunc) Pack(ctx context.Context, order int64) error {
	if f == nil {
		return nil
	}
	return f(ctx, order)
}

// wait bounds every wait of these tests: generous, the machines are shared.
const wait = 30 * time.Second

const (
	packEvery   = 10 * time.Second
	packWorkers = 2 // per instance: four runs a moment on the two instances
)

// packing is a shop whose pack_orders runs on a fake clock.
type packing struct {
	t       *testing.T
	shop    *shop
	clk     *clock.Fake
	packs   *countingPacker
	reports chan Packing
}

func startPacking(t *testing.T, dbURL string) *packing {
	p := &packing{
		t:       t,
		clk:     clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
		packs:   &countingPacker{next: packFunc(nil)},
		reports: make(chan Packing, 100),
	}
	s, err := start(context.Background(), config{
		DB: dbURL, Packer: p.packs, PackEvery: packEvery, Workers: packWorkers, Clock: p.clk,
		// A share's lease (a heartbeat) outlasts the clock's jumps of a
		// moment, so a share settling as the clock jumps is not taken over.
		Heartbeat: time.Minute,
		Report:    func(r Packing) { p.reports <- r },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	p.shop = s
	return p
}

// moment moves the clock to the next moment once both instances are ready
// for it (heartbeat, sweep, renewal and moment timers each), and returns the runs
// of the moment, ordered by worker.
func (p *packing) moment() []Packing {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := p.clk.WaitTimers(ctx, 4*len(p.shop.Names)); err != nil {
		p.t.Fatalf("instances not ready for the next moment (%d timers armed): %v", p.clk.Pending(), err)
	}
	p.clk.Advance(packEvery)
	at := p.clk.Now()
	var runs []Packing
	for len(runs) < packWorkers*len(p.shop.Names) {
		r := recv(p.t, p.reports, "run of pack_orders")
		if r.Err != nil {
			p.t.Fatalf("run %+v failed: %v", r.Run, r.Err)
		}
		if !r.Run.FiredAt.Equal(at) || r.Run.Workers != 4 || r.Run.Instances != 2 {
			p.t.Fatalf("run %+v: want FiredAt %v, Workers 4, Instances 2", r.Run, at)
		}
		runs = append(runs, r)
	}
	slices.SortFunc(runs, func(a, b Packing) int { return a.Run.Worker - b.Run.Worker })
	for i, r := range runs {
		if r.Run.Worker != i {
			p.t.Fatalf("moment %v: runs of workers %v, want 0..3 each once", at, workers(runs))
		}
	}
	return runs
}

func workers(runs []Packing) []int {
	var ws []int
	for _, r := range runs {
		ws = append(ws, r.Run.Worker)
	}
	return ws
}

type orderRow struct {
	id       int64
	paid     bool
	packedBy sql.NullString
	worker   sql.NullInt64
}

func (p *packing) orders() map[int64]orderRow {
	p.t.Helper()
	rows, err := p.shop.DB.Query(`SELECT id, paid, packed_by, packed_worker FROM shop_orders`)
	if err != nil {
		p.t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]orderRow{}
	for rows.Next() {
		var o orderRow
		if err := rows.Scan(&o.id, &o.paid, &o.packedBy, &o.worker); err != nil {
			p.t.Fatal(err)
		}
		out[o.id] = o
	}
	if err := rows.Err(); err != nil {
		p.t.Fatal(err)
	}
	return out
}

// checkPacked asserts that every order in runs was packed once, by the run
// that owns it (order mod Workers is its Worker), as the table says too.
func (p *packing) checkPacked(runs []Packing) map[string]int {
	p.t.Helper()
	orders := p.orders()
	by := map[string]int{}
	for _, r := range runs {
		for _, id := range r.Packed {
			o := orders[id]
			switch {
			case !r.Run.Owns(id) || id%int64(r.Run.Workers) != int64(r.Run.Worker):
				p.t.Errorf("order %d packed by worker %d of %d", id, r.Run.Worker, r.Run.Workers)
			case !o.paid:
				p.t.Errorf("order %d packed while unpaid", id)
			case o.packedBy.String != r.Run.InstanceName || o.worker.Int64 != int64(r.Run.Worker):
				p.t.Errorf("order %d: table says packed by %q worker %v, the run was %s worker %d",
					id, o.packedBy.String, o.worker, r.Run.InstanceName, r.Run.Worker)
			}
			by[r.Run.InstanceName]++
		}
	}
	if twice := p.packs.twice(); len(twice) > 0 {
		p.t.Errorf("orders packed more than once: %v", twice)
	}
	return by
}

// Two instances of two workers: one moment packs every paid order exactly
// once, each by the run whose Worker is the order modulo Workers, some on
// each instance, and leaves the unpaid alone.
func TestPackOrders(t *testing.T) {
	eachDatabase(t, func(t *testing.T, dbURL string) {
		p := startPacking(t, dbURL)
		ctx := context.Background()
		if err := seedOrders(ctx, p.shop.DB, p.shop.SQL, 1, 30); err != nil {
			t.Fatal(err)
		}
		runs := p.moment()
		for _, r := range runs {
			t.Logf("%s worker %d of %d: packed %v", r.Run.InstanceName, r.Run.Worker, r.Run.Workers, r.Packed)
		}
		by := p.checkPacked(runs)
		if by["shop-a"] == 0 || by["shop-b"] == 0 {
			t.Errorf("packed by instance: %v; want some on each", by)
		}
		for id, o := range p.orders() {
			switch {
			case o.paid && !o.packedBy.Valid:
				t.Errorf("paid order %d not packed", id)
			case !o.paid && o.packedBy.Valid:
				t.Errorf("unpaid order %d packed by %s", id, o.packedBy.String)
			}
		}
		if got := p.packs.total(); got != 24 {
			t.Errorf("%d packs, want 24 (30 orders, every fifth unpaid)", got)
		}

		// A later moment finds nothing left to pack.
		for _, r := range p.moment() {
			if len(r.Packed)+len(r.Busy) > 0 {
				t.Errorf("second moment: worker %d packed %v, left %v; want nothing", r.Run.Worker, r.Packed, r.Busy)
			}
		}
	})
}

// An order whose lock another holder has is left alone, and packed by the
// first moment after the lock is released.
func TestPackOrdersLeavesLockedOrder(t *testing.T) {
	eachDatabase(t, func(t *testing.T, dbURL string) {
		p := startPacking(t, dbURL)
		ctx := context.Background()
		if err := seedOrders(ctx, p.shop.DB, p.shop.SQL, 1, 8); err != nil {
			t.Fatal(err)
		}
		// Another program of the shop (its own pool, its own locker) holds
		// order 7 (worker 3's share).
		store, err := lock.NewSQL(ctx, inboxtest.Open(t, dbURL))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		other, err := lock.New(store, lock.Namespace("shop"))
		if err != nil {
			t.Fatal(err)
		}
		h, ok, err := other.Take(ctx, "order:7", lock.TTL(time.Hour))
		if err != nil || !ok {
			t.Fatalf("take order:7: %v %v", ok, err)
		}

		runs := p.moment()
		p.checkPacked(runs)
		if !slices.Equal(runs[3].Busy, []int64{7}) || slices.Contains(runs[3].Packed, 7) {
			t.Fatalf("worker 3 packed %v, left %v; want order 7 left while locked", runs[3].Packed, runs[3].Busy)
		}
		if o := p.orders()[7]; o.packedBy.Valid {
			t.Fatalf("order 7 packed by %s under another's lock", o.packedBy.String)
		}

		if err := other.Release(ctx, h.Token); err != nil {
			t.Fatal(err)
		}
		runs = p.moment()
		p.checkPacked(runs)
		if !slices.Equal(runs[3].Packed, []int64{7}) {
			t.Fatalf("after release, worker 3 packed %v, want [7]", runs[3].Packed)
		}
		if o := p.orders()[7]; o.packedBy.String != runs[3].Run.InstanceName {
			t.Fatalf("order 7: table says packed by %q", o.packedBy.String)
		}
		if got := p.packs.total(); got != 7 {
			t.Errorf("%d packs, want 7 (8 orders, order 5 unpaid)", got)
		}
	})
}

// A server prints one line per run, saying when it took the share over.
func TestPackingLine(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	run := schedule.Run{Schedule: PackSchedule, FiredAt: at, Worker: 2, Workers: 4, Runner: 0, Runners: 2, InstanceName: "shop-a", DealtTo: "shop-b"}
	for _, tc := range []struct {
		p    Packing
		want string
	}{
		{Packing{Run: run, Packed: []int64{2, 6}}, "pack_orders at 00:00:10: worker 2 of 4 (runner 0 of 2, taken over from shop-b): packed [2 6]"},
		{Packing{Run: func() schedule.Run { r := run; r.DealtTo = "shop-a"; return r }(), Busy: []int64{3}},
			"pack_orders at 00:00:10: worker 2 of 4 (runner 0 of 2): packed nothing, left [3] (locked elsewhere)"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("line %q, want %q", got, tc.want)
		}
	}
}
