package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// The soak's own processes: each worker is one service instance with its
// own pools, the producer writes rows by plain SQL. The soak command starts
// them from its own binary; they are not meant to be run by hand.
func init() {
	register("soak-worker", "", soakWorker)
	register("soak-producer", "", soakProducer)
}

// soakBeat is how often a long handling writes a sign of life: the overlap
// detector's resolution for a handling killed mid-way.
const soakBeat = 200 * time.Millisecond

func soakWorker(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("soak-worker", flag.ContinueOnError)
	url := fs.String("db", "", "database URL")
	table := fs.String("table", "", "inbox table")
	formName := fs.String("form", "lease", "claim form")
	workers := fs.Int("workers", 4, "handlers at once")
	leaseD := fs.Duration("lease", 2*time.Second, "lease (lease form)")
	handle := fs.Duration("handle", 100*time.Millisecond, "mean handling time")
	instance := fs.Int("instance", 0, "this worker's number in the soak")
	tx := fs.Bool("tx", false, "handle with inbox.HandleTx, inserting a sent row in the handling's transaction")
	outside := fs.Bool("effect-outside-tx", false, "with --tx, the control: handle with inbox.Handle and insert the sent row after the handling, in no transaction of the ack's")
	limit := fs.Int("limit", 0, "subscribe with inbox.Limit(\"tenant\", n); 0: no limit")
	limitOff := fs.Bool("limit-off", false, "with --limit, the control: mark as --limit does, subscribe without the limit")
	marksURL := fs.String("marks-db", "", "database URL of the marks (default --db)")
	marksTable := fs.String("marks-table", "", "the inbox table as the marks' pool names it (default --table)")
	workflow := fs.String("workflow", "", "batches: handle the rows of the batches (park one in ten, record the callbacks' counts)")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	if *marksURL == "" {
		*marksURL, *marksTable = *url, *table
	}
	form, err := formByName(*formName)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("soak_worker", *instance)
	bu, err := brokerURL(*url, *instance)
	if err != nil {
		return err
	}
	b, err := inbox.Open(bu, inbox.PollInterval(100*time.Millisecond), inbox.MaxConns(*workers+2), inbox.WithLogger(log))
	if err != nil {
		return err
	}
	defer b.Close()
	// The marks have a pool of their own, so that a form holding
	// connections for jobs in work never starves the detector.
	marks, d, err := dialect.Open(*marksURL)
	if err != nil {
		return err
	}
	defer marks.Close()
	marks.SetMaxOpenConns(*workers + 1)
	t, err := newSoakTables(d, *marksTable)
	if err != nil {
		return err
	}
	q, err := inbox.NewQueue[referenceRow](*table)
	if err != nil {
		return err
	}
	h := &soakHandler{db: marks, t: t, instance: *instance, mean: *handle, long: *leaseD * 3 / 2,
		start: t.markStart(), beat: t.markBeat(), done: t.markDone(), unstarted: t.markUnstarted()}
	svc := inbox.NewService("soak-worker", strconv.Itoa(*instance), b)
	opts := []inbox.SubOption{inbox.Form(form), inbox.Workers(*workers), inbox.Lease(*leaseD), inbox.ShutdownTimeout(20 * time.Second)}
	sent := insertSent(d, *table)
	switch {
	case *limit > 0:
		lq, err := inbox.NewQueue[limitRow](*table)
		if err != nil {
			return err
		}
		if !*limitOff {
			opts = append(opts, inbox.Limit(soakTenant, *limit))
		}
		_, err = inbox.Handle(svc, lq, func(ctx context.Context, row limitRow) error {
			return h.handle(ctx, h.db, row.Payload, limitMark(ctx, row))
		}, opts...)
	case *workflow == soakBatches:
		_, err = inbox.HandleTx(svc, q, h.batchHandler(d, *table, sent), opts...)
	case *tx && *outside:
		_, err = inbox.Handle(svc, q, func(ctx context.Context, row referenceRow) error {
			return h.handleThen(ctx, h.db, row, sent)
		}, opts...)
	case *tx:
		_, err = inbox.HandleTx(svc, q, func(ctx context.Context, tx *sql.Tx, row referenceRow) error {
			if d.Kind == dialect.SQLite {
				// The handling's transaction holds SQLite's one write lock
				// until it commits: a write on another connection would wait
				// for it, so every write of the handling goes in it, as a
				// SQLite user of HandleTx must write. A killed handling's
				// marks roll back with its effect.
				return h.handleThen(ctx, tx, row, sent)
			}
			if err := h.handle(ctx, h.db, row.Payload, noMark); err != nil {
				return err
			}
			return h.effect(ctx, tx, row, sent)
		}, opts...)
	default:
		_, err = inbox.Handle(svc, q, func(ctx context.Context, row referenceRow) error { return h.handle(ctx, h.db, row.Payload, noMark) }, opts...)
	}
	if err != nil {
		return err
	}
	return svc.Run(ctx)
}

type soakHandler struct {
	db                *sql.DB
	t                 *soakTables
	instance          int
	mean, long        time.Duration
	start, beat, done string
	unstarted         string
}

// soakDB is where a handling writes its marks: the marks' own pool, or
// the handling's transaction.
type soakDB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// handleThen is handle, then the effect, both written through db.
func (h *soakHandler) handleThen(ctx context.Context, db soakDB, row referenceRow, sent string) error {
	if err := h.handle(ctx, db, row.Payload, noMark); err != nil {
		return err
	}
	return h.effect(ctx, db, row, sent)
}

// effect inserts the handling's sent row through db.
func (h *soakHandler) effect(ctx context.Context, db soakDB, row referenceRow, sent string) error {
	seq, err := seqOf(row.Payload)
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, sent, seq)
	return err
}

// handle marks its start, works (sleeps) for a random time, writing a sign
// of life every soakBeat, and marks its end, all on the database's clock
// and through db. One handling in a hundred runs one and a half leases, so
// that the lease form must extend its lease. A handler whose context ends
// (lease lost, timeout, shutdown) stops at once and writes nothing more.
func (h *soakHandler) handle(ctx context.Context, db soakDB, payload []byte, lm markLimit) error {
	seq, err := seqOf(payload)
	if err != nil {
		return err
	}
	work := time.Duration(rand.Int64N(int64(2*h.mean) + 1))
	if rand.IntN(100) == 0 {
		work = h.long
	}
	var mark int64
	if err := h.markStart(ctx, db, seq, lm, &mark); err != nil {
		return err
	}
	end := time.Now().Add(work)
	for {
		left := time.Until(end)
		if left <= 0 {
			break
		}
		t := time.NewTimer(min(left, soakBeat))
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
		if time.Until(end) > 0 {
			if _, err := db.ExecContext(ctx, h.beat, mark); err != nil {
				return fmt.Errorf("beat: %w", err)
			}
		}
	}
	if _, err := db.ExecContext(ctx, h.done, mark); err != nil {
		return fmt.Errorf("done mark: %w", err)
	}
	return nil
}

// soakProducer writes rows 1..jobs by plain SQL, spread evenly over a span
// that began at --start, each batch in one transaction with its record in
// the produced table. Restarted, it carries on from what the database says
// was committed. With --pause-in-tx, each line read on stdin makes it hold
// its next transaction open and print "in-tx" on stdout, so that the soak
// can kill it while it holds SQLite's write lock.
func soakProducer(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("soak-producer", flag.ContinueOnError)
	url := fs.String("db", "", "database URL")
	table := fs.String("table", "", "inbox table")
	jobs := fs.Int64("jobs", 0, "rows to write in all")
	startMS := fs.Int64("start", 0, "when the span began, Unix milliseconds")
	over := fs.Duration("over", time.Minute, "span over which rows are spread")
	pause := fs.Bool("pause-in-tx", false, "on a line on stdin, hold the next transaction open and say so on stdout")
	keys := fs.Int("keys", 0, "tenants of the rows (the limit mode); 0: the table has no tenant column")
	workflow := fs.String("workflow", "", "diamonds or batches: publish diamonds of four rows, or batches of ten and a callback, through a broker (--jobs counts rows, whole units)")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	db, d, err := dialect.Open(*url)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(2)
	t, err := newSoakTables(d, *table)
	if err != nil {
		return err
	}
	t.keys = *keys
	var flows *flowProducer
	if *workflow != "" {
		if flows, err = newFlowProducer(*url, *table, *workflow); err != nil {
			return err
		}
		defer flows.b.Close()
	}
	// A line on stdin asks for the next transaction to be held open and
	// announced, so that the soak can kill the producer inside it.
	holdNext := make(chan struct{}, 1)
	if *pause {
		go func() {
			s := bufio.NewScanner(os.Stdin)
			for s.Scan() {
				select {
				case holdNext <- struct{}{}:
				default:
				}
			}
		}()
	}
	begun := time.UnixMilli(*startMS)
	produce, record := t.produce(), t.produceRecord()
	have := int64(-1) // unknown: read it from the database
	failures := 0
	for {
		if have < 0 {
			if err := db.QueryRowContext(ctx, t.producedCount()).Scan(&have); err != nil {
				have = -1
			}
		}
		if have >= *jobs {
			return nil
		}
		if have >= 0 {
			target := *jobs
			if el := time.Since(begun); el < *over {
				target = min(*jobs, int64(float64(*jobs)*el.Seconds()/over.Seconds())+1)
			}
			n := min(target, have+500)
			if flows != nil {
				unit := flowUnit(*workflow)
				n = min(target, have+100) / unit * unit // whole diamonds or batches
			}
			if n > have {
				hold := false
				if *pause {
					select {
					case <-holdNext:
						hold = true
					default:
					}
				}
				if flows != nil {
					err = flows.publish(ctx, record, have+1, n, hold)
				} else {
					err = produceBatch(ctx, db, produce, record, have+1, n, hold)
				}
				if err == nil {
					have, failures = n, 0
				}
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// The commit's fate may be unknown: read it back.
			have = -1
			if failures == 0 {
				fmt.Fprintln(os.Stderr, "soak producer: write failed; retrying:", err)
			}
			failures++
			err = nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(50 * time.Millisecond * time.Duration(min(failures+1, 10))):
		}
	}
}

func produceBatch(ctx context.Context, db *sql.DB, produce, record string, from, to int64, hold bool) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, produce, from, to); err != nil {
		return err
	}
	return commitBatch(ctx, tx, record, from, to, hold)
}

// commitBatch records rows from..to as produced and commits the batch's
// transaction; with hold it first says so on stdout and holds the
// transaction open, for the soak to kill the producer there.
func commitBatch(ctx context.Context, tx *sql.Tx, record string, from, to int64, hold bool) error {
	if hold {
		fmt.Println("in-tx")
		time.Sleep(5 * time.Second) // the soak kills the producer here
	}
	if _, err := tx.ExecContext(ctx, record, from, to); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	return nil
}

// markStart writes the start mark, trying again every soakBeat while the
// marks' database does not answer (a restart), until the handling's
// context ends: a handling that began is marked, unless its hold ended
// first.
func (h *soakHandler) markStart(ctx context.Context, db soakDB, seq int64, lm markLimit, mark *int64) error {
	for {
		err := db.QueryRowContext(ctx, h.start, seq, h.instance, lm.tenant, lm.slot, lm.fence, lm.attempts).Scan(mark)
		if err == nil {
			return nil
		}
		if _, tx := db.(*sql.Tx); tx {
			return fmt.Errorf("start mark: %w", err)
		}
		if ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(soakBeat):
				continue
			}
		}
		// The handling's hold ended before it could be marked: its
		// attempt is recorded apart, so that the verdict counts it as
		// used by a handling.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, uerr := h.db.ExecContext(uctx, h.unstarted, seq, lm.attempts)
		cancel()
		return fmt.Errorf("start mark: %w", errors.Join(err, uerr))
	}
}

// markLimit is what a handling of the limit mode marks beside its start.
type markLimit struct {
	tenant         *int64
	slot, attempts int
	fence          int64
}

// noMark marks no tenant, slot or attempt.
var noMark = markLimit{slot: -1}

// limitMark is the mark of a handling of row: its tenant, the slot and
// fence its context holds, and the attempt its claim counted.
func limitMark(ctx context.Context, row limitRow) markLimit {
	m := markLimit{tenant: row.Tenant, slot: -1, attempts: row.Attempts}
	if s, ok := inbox.SlotFrom(ctx); ok && row.Tenant != nil && s.Key == strconv.FormatInt(*row.Tenant, 10) {
		m.slot, m.fence = s.Slot, s.Fence
	}
	return m
}

var errSoakFailed = errors.New("soak failed")

// referenceRow is the reference table's shape (migrations.Apply).
type referenceRow struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Group       string     `db:"group_name" inbox:"group"`
}

// limitRow is the reference table's shape with its attempts and the
// limit mode's tenant.
type limitRow struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Group       string     `db:"group_name" inbox:"group"`
	Attempts    int        `db:"attempts" inbox:"attempts"`
	Tenant      *int64     `db:"tenant"`
}
