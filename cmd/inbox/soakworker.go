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
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	form, err := formByName(*formName)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("soak_worker", *instance)
	b, err := inbox.Open(*url, inbox.PollInterval(100*time.Millisecond), inbox.MaxConns(*workers+2), inbox.WithLogger(log))
	if err != nil {
		return err
	}
	defer b.Close()
	// The marks have a pool of their own, so that a form holding
	// connections for jobs in work never starves the detector.
	marks, d, err := dialect.Open(*url)
	if err != nil {
		return err
	}
	defer marks.Close()
	marks.SetMaxOpenConns(*workers + 1)
	t, err := newSoakTables(d, *table)
	if err != nil {
		return err
	}
	q, err := inbox.NewQueue[referenceRow](*table)
	if err != nil {
		return err
	}
	h := &soakHandler{db: marks, t: t, instance: *instance, mean: *handle, long: *leaseD * 3 / 2,
		start: t.markStart(), beat: t.markBeat(), done: t.markDone()}
	svc := inbox.NewService("soak-worker", strconv.Itoa(*instance), b)
	opts := []inbox.SubOption{inbox.Form(form), inbox.Workers(*workers), inbox.Lease(*leaseD), inbox.ShutdownTimeout(20 * time.Second)}
	sent := insertSent(d, *table)
	switch {
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
			if err := h.handle(ctx, h.db, row); err != nil {
				return err
			}
			return h.effect(ctx, tx, row, sent)
		}, opts...)
	default:
		_, err = inbox.Handle(svc, q, func(ctx context.Context, row referenceRow) error { return h.handle(ctx, h.db, row) }, opts...)
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
}

// soakDB is where a handling writes its marks: the marks' own pool, or
// the handling's transaction.
type soakDB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// handleThen is handle, then the effect, both written through db.
func (h *soakHandler) handleThen(ctx context.Context, db soakDB, row referenceRow, sent string) error {
	if err := h.handle(ctx, db, row); err != nil {
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
func (h *soakHandler) handle(ctx context.Context, db soakDB, row referenceRow) error {
	seq, err := strconv.ParseInt(string(row.Payload), 10, 64)
	if err != nil {
		return fmt.Errorf("payload %q: %w", row.Payload, err)
	}
	work := time.Duration(rand.Int64N(int64(2*h.mean) + 1))
	if rand.IntN(100) == 0 {
		work = h.long
	}
	var mark int64
	if err := db.QueryRowContext(ctx, h.start, seq, h.instance).Scan(&mark); err != nil {
		return fmt.Errorf("start mark: %w", err)
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
			if n := min(target, have+500); n > have {
				hold := false
				if *pause {
					select {
					case <-holdNext:
						hold = true
					default:
					}
				}
				err = produceBatch(ctx, db, produce, record, have+1, n, hold)
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

var errSoakFailed = errors.New("soak failed")

// referenceRow is the reference table's shape (migrations.Apply).
type referenceRow struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Group       string     `db:"group_name" inbox:"group"`
}
