package main

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/sqlinbox/sqlinbox/lock"
	"github.com/sqlinbox/sqlinbox/schedule"
)

// PackSchedule is the name of the packing schedule, the same on every
// instance.
const PackSchedule = "pack_orders"

// DefaultPackEvery is how often the packing schedule fires unless told.
const DefaultPackEvery = 10 * time.Second

// PackLockTTL bounds a hold on an order's lock: a packer that dies frees the
// order for a later moment after this long.
const PackLockTTL = time.Minute

// shopDDL are the shop's own tables, read alike by both engines: an order
// is waiting to be packed while it is paid and packed_by is NULL; an
// invoice is sent once it has a row in shop_invoices.
var shopDDL = []string{`CREATE TABLE IF NOT EXISTS shop_orders (
	id            BIGINT PRIMARY KEY,
	paid          BOOLEAN NOT NULL DEFAULT FALSE,
	packed_by     TEXT,
	packed_worker INTEGER
)`, `CREATE TABLE IF NOT EXISTS shop_invoices (
	order_id BIGINT PRIMARY KEY,
	sent_by  TEXT NOT NULL
)`}

// Statements are the shop's own SQL, written with $n placeholders and
// rebound to ?n for SQLite.
type Statements struct {
	share, packedBy, mark, seed, invoiceSent, recordInvoice string
}

// IsPostgres tells a Postgres URL from a SQLite one, as inbox.OpenDB reads
// them.
func IsPostgres(url string) bool {
	return strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://")
}

var dollar = regexp.MustCompile(`\$(\d+)`)

// statementsFor writes the shop's statements for the database at url.
func statementsFor(url string) Statements {
	bind := func(q string) string {
		if IsPostgres(url) {
			return q
		}
		return dollar.ReplaceAllString(q, "?$1")
	}
	return Statements{
		// The run's share, in SQL so only its orders travel: the ids r.Owns.
		share:         bind(`SELECT id FROM shop_orders WHERE paid AND packed_by IS NULL AND id % $1 = $2 ORDER BY id`),
		packedBy:      bind(`SELECT packed_by FROM shop_orders WHERE id = $1`),
		mark:          bind(`UPDATE shop_orders SET packed_by = $1, packed_worker = $2 WHERE id = $3`),
		seed:          bind(`INSERT INTO shop_orders (id, paid) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`),
		invoiceSent:   bind(`SELECT sent_by FROM shop_invoices WHERE order_id = $1`),
		recordInvoice: bind(`INSERT INTO shop_invoices (order_id, sent_by) VALUES ($1, $2) ON CONFLICT (order_id) DO NOTHING`),
	}
}

// Packer puts an order in its box (a label, a call to the warehouse): it
// must run once per order.
type Packer interface {
	Pack(ctx context.Context, order int64) error
}

// Packing is what one run of pack_orders did.
type Packing struct {
	Run schedule.Run
	// Packed are the orders this run packed.
	Packed []int64
	// Busy are orders of the run's share whose lock another holder had: a
	// later moment packs them.
	Busy []int64
	// Err is the error that ended the run early, if any.
	Err error
}

// packer is one instance's pack_orders handler: its pool and its locker.
type packer struct {
	db     *sql.DB
	locker *lock.Locker
	pack   Packer
	report func(Packing) // nil: no report

	sql Statements
}

func newPacker(db *sql.DB, stmts Statements, locker *lock.Locker, pack Packer, report func(Packing)) *packer {
	return &packer{db: db, sql: stmts, locker: locker, pack: pack, report: report}
}

// run is the schedule's handler: it packs the paid orders of r's share, each
// under the order's lock.
func (p *packer) run(ctx context.Context, r schedule.Run) error {
	out := Packing{Run: r}
	defer func() {
		if p.report != nil {
			p.report(out)
		}
	}()
	orders, err := p.orders(ctx, r)
	if err != nil {
		out.Err = err
		return err
	}
	for _, order := range orders {
		got, err := p.packOne(ctx, r, order)
		switch {
		case err != nil:
			out.Err = err
			return err
		case got == packed:
			out.Packed = append(out.Packed, order)
		case got == busy:
			out.Busy = append(out.Busy, order)
		}
	}
	return nil
}

// outcome is what packOne did with an order.
type outcome int

const (
	packed        outcome = iota
	busy                  // another holder has the order's lock
	packedAlready         // the holder before us packed it
)

// orders lists the paid, unpacked orders whose number modulo r.Workers is
// r.Worker.
func (p *packer) orders(ctx context.Context, r schedule.Run) ([]int64, error) {
	rows, err := p.db.QueryContext(ctx, p.sql.share, r.Workers, r.Worker)
	if err != nil {
		return nil, fmt.Errorf("pack_orders: list the share of worker %d of %d: %w", r.Worker, r.Workers, err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// packOne packs order under its lock. Another holder of the lock is a run
// of an earlier moment still busy with the order (the membership changed,
// and with it what each worker owns), or any other code that must keep the
// order still: the order is left to a later moment.
func (p *packer) packOne(ctx context.Context, r schedule.Run, order int64) (outcome, error) {
	h, ok, err := p.locker.Take(ctx, fmt.Sprintf("order:%d", order), lock.TTL(PackLockTTL))
	if err != nil {
		return 0, fmt.Errorf("pack_orders: lock order %d: %w", order, err)
	}
	if !ok {
		return busy, nil
	}
	defer p.locker.Release(context.WithoutCancel(ctx), h.Token)
	// Read again under the lock: the holder before us may have packed it
	// between our list and our lock.
	var by sql.NullString
	if err := p.db.QueryRowContext(ctx, p.sql.packedBy, order).Scan(&by); err != nil {
		return 0, fmt.Errorf("pack_orders: read order %d: %w", order, err)
	}
	if by.Valid {
		return packedAlready, nil
	}
	if err := p.pack.Pack(ctx, order); err != nil {
		return 0, fmt.Errorf("pack_orders: pack order %d: %w", order, err)
	}
	if _, err := p.db.ExecContext(ctx, p.sql.mark, r.InstanceName, r.Worker, order); err != nil {
		return 0, fmt.Errorf("pack_orders: mark order %d packed: %w", order, err)
	}
	return packed, nil
}

// applyShop creates the shop's tables.
func applyShop(ctx context.Context, db *sql.DB) error {
	for _, ddl := range shopDDL {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			return fmt.Errorf("shop: create the shop's tables: %w", err)
		}
	}
	return nil
}

// seedOrders writes orders first..first+n-1 where they are missing; every
// fifth is not paid yet.
func seedOrders(ctx context.Context, db *sql.DB, stmts Statements, first int64, n int) error {
	for i := range int64(n) {
		if _, err := db.ExecContext(ctx, stmts.seed, first+i, i%5 != 4); err != nil {
			return fmt.Errorf("shop: seed order %d: %w", first+i, err)
		}
	}
	return nil
}

// slowPacker stands in for the warehouse: it takes a while.
type slowPacker struct{ delay time.Duration }

func (s slowPacker) Pack(ctx context.Context, order int64) error {
	select {
	case <-time.After(s.delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
