package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

func init() {
	register("soak", "run worker processes under load, SIGKILL them (and restart the database); check no row is lost or held twice", soak)
}

// soakConfig is the soak's flags.
type soakConfig struct {
	url, form, table, restartCmd string
	processes, workers           int
	jobs                         int64
	killEvery, seconds, drain    time.Duration
	lease, handle                time.Duration
	restartDB                    bool
	tx, outside                  bool
	// The limit mode (soaklimit.go): rows carry a tenant of keys, workers
	// subscribe with inbox.Limit("tenant", limit), and a backend of a
	// worker is terminated every terminateEvery.
	limit, keys int
	limitOff    bool
	// The workflow mode (soakflow.go): "", "diamonds" or "batches".
	workflow       string
	terminateEvery time.Duration
}

func soak(ctx context.Context, args []string) error {
	var c soakConfig
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.StringVar(&c.url, "db", "", "database URL (required): postgres://..., mysql://... (MariaDB) or a SQLite file, sqlite:///abs/path.db")
	fs.StringVar(&c.form, "form", "lease", "claim form: lease, rowlock or advisory")
	fs.StringVar(&c.table, "table", "inbox_soak", "inbox table, or schema.table; the soak drops and recreates it and its _produced, _marks and _kills tables")
	fs.IntVar(&c.processes, "processes", 4, "worker processes at once")
	fs.IntVar(&c.workers, "workers", 8, "handlers at once in each worker process")
	fs.Int64Var(&c.jobs, "jobs", 5000, "rows the producer writes (with --workflow diamonds, diamonds of four rows; batches, batches of ten rows and a callback), spread over the first four fifths of --seconds")
	fs.DurationVar(&c.killEvery, "kill-every", 5*time.Second, "SIGKILL a random worker process this often and start a fresh one; 0 kills none")
	fs.BoolVar(&c.restartDB, "restart-db", false, "restart the database once, half way (SQLite: SIGKILL the producer inside a write transaction)")
	fs.DurationVar(&c.seconds, "seconds", time.Minute, "how long the kills go on (a bare number is seconds); then the soak waits for the inbox to drain")
	fs.DurationVar(&c.drain, "drain", time.Minute, "how long to wait for the inbox to drain after the kills stop")
	fs.DurationVar(&c.lease, "lease", 2*time.Second, "the workers' lease (lease form): a killed worker's rows come back after it")
	fs.DurationVar(&c.handle, "handle", 100*time.Millisecond, "mean handling time (uniform on 0..2x; one in a hundred runs 1.5 leases)")
	fs.BoolVar(&c.tx, "tx", false, "workers use inbox.HandleTx and insert one sent row per handling in its transaction; the verdict asks for exactly one per row (on SQLite the handling's marks go in its transaction too)")
	fs.BoolVar(&c.outside, "effect-outside-tx", false, "with --tx, the control: workers use inbox.Handle and insert the sent row after the handling, outside the ack's transaction, so sent_not_once counts the effects a kill repeated")
	fs.IntVar(&c.limit, "limit", 0, "with n > 0, the limit mode: rows carry a tenant (half over the first tenth of --keys, half over the rest), the workers subscribe with inbox.Limit(\"tenant\", n), and the verdict asks that no more than n rows of a tenant were in work at once, with no attempt used by a row that waited on its limit")
	fs.StringVar(&c.workflow, "workflow", "", "diamonds: the workflow mode: --jobs diamonds of four rows published through a broker in one transaction each, A, then B and C after A (inbox.After), then D after B and C; workers use inbox.HandleTx and record each ack in its transaction, and the verdict asks that every row was acked once and no step began before its parents' acks (needs migrations.ApplyDependencies, which the soak runs). batches: --jobs batches of ten rows and a callback (inbox.PublishBatchTx), one row in ten parked (inbox.Park); the verdict asks that every callback was acked once, began only after its ten rows were settled, and read their acked and parked counts (inbox.ParentsFrom)")
	fs.BoolVar(&c.limitOff, "limit-off", false, "with --limit, the control: the workers subscribe without the limit, so that key_overlaps counts what the limit prevents (the soak then fails)")
	fs.IntVar(&c.keys, "keys", 50, "tenants of the rows in the limit mode (at least 1)")
	fs.DurationVar(&c.terminateEvery, "terminate-every", 0, "terminate a server session of a worker's broker this often (Postgres: pg_terminate_backend; MariaDB: KILL), one in a statement or a transaction where there is one; 0 terminates none. Postgres and MariaDB/MySQL only")
	fs.StringVar(&c.restartCmd, "restart-cmd", "", "shell command that restarts the database server (Postgres default: pg_ctlcluster --skip-systemctl-redirect VERSION main restart, VERSION read from /etc/postgresql; MariaDB: required, e.g. 'service mariadb restart')")
	// --seconds 60 reads as a minute, as the issue writes it.
	for i, a := range args {
		for _, p := range []string{"--seconds=", "-seconds="} {
			if v, ok := strings.CutPrefix(a, p); ok && isNumber(v) {
				args[i] = p + v + "s"
			}
		}
		if (a == "--seconds" || a == "-seconds") && i+1 < len(args) && isNumber(args[i+1]) {
			args[i+1] += "s"
		}
	}
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	switch {
	case c.url == "":
		return fmt.Errorf("--db is required")
	case c.processes < 1, c.workers < 1, c.jobs < 1:
		return fmt.Errorf("--processes, --workers and --jobs must be at least 1")
	case c.seconds <= 0, c.killEvery < 0, c.lease < time.Second, c.handle < 0:
		return fmt.Errorf("--seconds must be positive, --kill-every not negative, --lease at least 1s")
	case c.limit < 0, c.limit > 0 && c.keys < 1, c.terminateEvery < 0:
		return fmt.Errorf("--limit must not be negative, --keys at least 1 with a limit, --terminate-every not negative")
	case c.workflow != "" && c.workflow != soakDiamonds && c.workflow != soakBatches:
		return fmt.Errorf("--workflow %q: the soak knows %q and %q", c.workflow, soakDiamonds, soakBatches)
	case c.workflow != "" && (c.limit > 0 || c.tx || c.terminateEvery > 0):
		return fmt.Errorf("--workflow is not soaked with --limit, --tx or --terminate-every (it handles with inbox.HandleTx itself)")
	case c.limitOff && c.limit == 0:
		return fmt.Errorf("--limit-off is the control of --limit: give both")
	case c.limit > 0 && (c.tx || c.outside):
		return fmt.Errorf("--limit is not soaked with --tx: give one or the other")
	}
	form, err := formByName(c.form)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the soak's own binary: %w", err)
	}
	db, d, err := dialect.Open(c.url)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(2)
	if err := form.Supports(d); err != nil {
		return fmt.Errorf("--form %s: %w", c.form, err)
	}
	if c.restartDB && d.Kind == dialect.Postgres && c.restartCmd == "" {
		vs, err := os.ReadDir("/etc/postgresql")
		if err != nil || len(vs) != 1 {
			return fmt.Errorf("--restart-db: cannot tell the Postgres cluster from /etc/postgresql (%v): give --restart-cmd", err)
		}
		c.restartCmd = "pg_ctlcluster --skip-systemctl-redirect " + vs[0].Name() + " main restart"
	}
	if c.restartDB && d.Kind == dialect.MySQL && c.restartCmd == "" {
		return fmt.Errorf("--restart-db on MariaDB/MySQL needs --restart-cmd, the shell command that restarts the server (e.g. 'service mariadb restart')")
	}
	if c.terminateEvery > 0 && d.Kind == dialect.SQLite {
		return fmt.Errorf("--terminate-every: SQLite has no server sessions to terminate; kill the workers with --kill-every")
	}
	t, err := newSoakTables(d, c.table)
	if err != nil {
		return err
	}
	if c.limit > 0 {
		t.keys = c.keys
	}
	t.workflow, t.batches = c.workflow != "", c.workflow == soakBatches
	if err := t.reset(ctx, db); err != nil {
		return err
	}
	if err := prepareWorkflow(ctx, db, t, c.workflow); err != nil {
		return err
	}
	if err := prepareLimit(ctx, db, t, c.limit); err != nil {
		return err
	}
	side, err := soakSide(c, d)
	if err != nil {
		return err
	}
	if side.url != c.url {
		// The soak's own records go through a pool of their own, on
		// another database, so that the sessions the soak terminates
		// are told from those of the workers' brokers (see soakSide).
		db.Close()
		if db, _, err = dialect.Open(side.url); err != nil {
			return err
		}
		defer db.Close()
		db.SetMaxOpenConns(2)
		if t, err = newSoakTables(d, side.table); err != nil {
			return err
		}
		t.keys = c.keys
	}
	if c.outside && !c.tx {
		return fmt.Errorf("--effect-outside-tx is the control of --tx: give both")
	}
	if c.tx || c.workflow != "" {
		if err := makeSent(ctx, db, d, c.table); err != nil {
			return err
		}
	}
	if c.workflow == soakBatches {
		if err := makeBatchTable(ctx, db, d, c.table); err != nil {
			return err
		}
	}
	r := &soakRun{c: c, exe: exe, db: db, d: d, t: t, side: side, begun: time.Now(), exited: make(chan *soakProc, 64), inTx: make(chan struct{}, 1)}
	defer r.killAll()
	return r.run(ctx)
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// soakProc is one process the soak started.
type soakProc struct {
	instance int // 0 for the producer
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	done     chan struct{} // closed when it has exited and been reaped
	err      error
	killed   bool // by the soak, on purpose
}

type soakRun struct {
	c     soakConfig
	exe   string
	db    *sql.DB
	d     *dialect.Dialect
	t     *soakTables
	side  soakSideDB
	begun time.Time

	workers      []*soakProc
	producer     *soakProc
	next         int // the next worker's instance number
	exited       chan *soakProc
	inTx         chan struct{}  // the producer is inside a transaction
	producerIn   io.WriteCloser // a line asks the producer to hold its next transaction
	kills        int
	restarts     int
	restartTimes []restart // each server restart, on the database's clock
	unexpected   int       // processes that exited without being told to
	records      sync.WaitGroup
	terminator   // the sessions terminated (soaklimit.go)
}

func (r *soakRun) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "soak %6.1fs: "+format+"\n", append([]any{time.Since(r.begun).Seconds()}, args...)...)
}

func (r *soakRun) start(instance int, stdout io.Writer, args ...string) (*soakProc, error) {
	cmd := exec.Command(r.exe, args...)
	cmd.Stdout, cmd.Stderr = stdout, os.Stderr
	dieWithParent(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", args[0], err)
	}
	p := &soakProc{instance: instance, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
		r.exited <- p
	}()
	return p, nil
}

func (r *soakRun) startWorker() error {
	r.next++
	p, err := r.start(r.next, os.Stderr, "soak-worker", "--db", r.c.url, "--table", r.c.table, "--form", r.c.form,
		"--workers", strconv.Itoa(r.c.workers), "--lease", r.c.lease.String(), "--handle", r.c.handle.String(),
		"--instance", strconv.Itoa(r.next), "--tx="+strconv.FormatBool(r.c.tx || r.c.workflow != ""), "--effect-outside-tx="+strconv.FormatBool(r.c.outside),
		"--limit", strconv.Itoa(r.c.limit), "--limit-off="+strconv.FormatBool(r.c.limitOff), "--workflow", r.c.workflow, "--marks-db", r.side.url, "--marks-table", r.side.table)
	if err != nil {
		return err
	}
	r.workers = append(r.workers, p)
	return nil
}

func (r *soakRun) startProducer() error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	args := []string{"soak-producer", "--db", r.side.url, "--table", r.side.table, "--jobs", strconv.FormatInt(r.c.rows(), 10), "--keys", strconv.Itoa(r.t.keys), "--workflow", r.c.workflow,
		"--start", strconv.FormatInt(r.begun.UnixMilli(), 10), "--over", (r.c.seconds * 4 / 5).String()}
	if r.c.restartDB && r.d.Kind == dialect.SQLite {
		args = append(args, "--pause-in-tx")
	}
	p, err := r.start(0, pw, args...)
	pw.Close()
	if err != nil {
		pr.Close()
		return err
	}
	r.producerIn = p.stdin
	go func() {
		defer pr.Close()
		s := bufio.NewScanner(pr)
		for s.Scan() {
			if s.Text() == "in-tx" {
				select {
				case r.inTx <- struct{}{}:
				default:
				}
			}
		}
	}()
	r.producer = p
	return nil
}

// kill sends SIGKILL and waits until the process is reaped.
func (r *soakRun) kill(p *soakProc) {
	p.killed = true
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// killAll ends every process still running: the soak's last word, also on
// an error or an interrupt.
func (r *soakRun) killAll() {
	for _, p := range append(r.workers, r.producer) {
		if p != nil {
			select {
			case <-p.done:
			default:
				r.kill(p)
			}
		}
	}
}

// recordKill writes the kill into the database, waiting out a restart.
func (r *soakRun) recordKill(instance int) {
	r.records.Add(1)
	go func() {
		defer r.records.Done()
		q := r.t.recordKill()
		for deadline := time.Now().Add(2 * time.Minute); ; {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := r.db.ExecContext(ctx, q, instance)
			cancel()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				r.logf("could not record the kill of worker %d: %v", instance, err)
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()
}

func (r *soakRun) run(ctx context.Context) error {
	c := &r.c
	r.logf("form=%s db=%s processes=%d workers=%d jobs=%d kill-every=%v restart-db=%v seconds=%v lease=%v table=%s",
		c.form, r.d, c.processes, c.workers, c.jobs, c.killEvery, c.restartDB, c.seconds, c.lease, c.table)
	for range c.processes {
		if err := r.startWorker(); err != nil {
			return err
		}
	}
	if err := r.startProducer(); err != nil {
		return err
	}

	var killC <-chan time.Time
	if c.killEvery > 0 {
		k := time.NewTicker(c.killEvery)
		defer k.Stop()
		killC = k.C
	}
	progress := time.NewTicker(5 * time.Second)
	defer progress.Stop()
	end := time.NewTimer(c.seconds)
	defer end.Stop()
	var terminateC <-chan time.Time
	if c.terminateEvery > 0 {
		tt := time.NewTicker(c.terminateEvery)
		defer tt.Stop()
		terminateC = tt.C
	}
	var restartC <-chan time.Time
	if c.restartDB {
		rt := time.NewTimer(c.seconds / 2)
		defer rt.Stop()
		restartC = rt.C
	}
	restarted := make(chan error, 1)
	var writerKill <-chan struct{} // armed on SQLite at the restart's time
	var writerGiveUp <-chan time.Time
	var drainC <-chan time.Time
	var drainDeadline time.Time
	drained := false
	restarting := false
	var finalCounts soakCounts

loop:
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()

		case <-killC:
			var alive []*soakProc
			for _, p := range r.workers {
				if !p.killed {
					select {
					case <-p.done:
					default:
						alive = append(alive, p)
					}
				}
			}
			if len(alive) == 0 {
				break
			}
			p := alive[rand.IntN(len(alive))]
			r.kill(p)
			r.kills++
			r.recordKill(p.instance)
			if err := r.startWorker(); err != nil {
				return err
			}

		case <-terminateC:
			r.terminate(ctx)

		case p := <-r.exited:
			if p.killed || drained {
				break
			}
			if p == r.producer {
				if p.err == nil {
					r.logf("producer wrote all %d rows", c.rows())
					r.producer = nil
					break
				}
				r.unexpected++
				r.logf("producer exited on its own (%v); starting another", p.err)
				if err := r.startProducer(); err != nil {
					return err
				}
				break
			}
			r.unexpected++
			r.logf("worker %d exited on its own (%v); starting another", p.instance, p.err)
			if err := r.startWorker(); err != nil {
				return err
			}

		case <-restartC:
			if r.d.Kind != dialect.SQLite {
				r.logf("restarting the database: %s", c.restartCmd)
				if us, err := r.t.readNowUS(ctx, r.db); err == nil {
					r.restartTimes = append(r.restartTimes, restart{beganUS: us, backUS: math.MaxInt64})
				} else {
					r.logf("could not read the database's clock before the restart: %v", err)
				}
				restarting = true
				go func() { restarted <- restartServer(ctx, c.restartCmd, r.db) }()
				break
			}
			if r.producer == nil {
				r.logf("the producer has finished: no writer to kill")
				break
			}
			r.logf("waiting for the producer to be inside a write transaction, to SIGKILL it there")
			select { // a stale announcement
			case <-r.inTx:
			default:
			}
			_, _ = io.WriteString(r.producerIn, "hold\n")
			writerKill = r.inTx
			writerGiveUp = time.After(10 * time.Second)

		case <-writerKill:
			writerKill, writerGiveUp = nil, nil
			if r.producer != nil {
				r.kill(r.producer)
				r.restarts++
				r.logf("killed the producer inside its write transaction; starting another")
				if err := r.startProducer(); err != nil {
					return err
				}
			}

		case <-writerGiveUp:
			writerKill, writerGiveUp = nil, nil
			r.logf("the producer opened no transaction within 10s: no writer killed")

		case err := <-restarted:
			restarting = false
			if err != nil {
				r.logf("database restart failed: %v", err)
				break
			}
			r.restarts++
			if us, err := r.t.readNowUS(ctx, r.db); err == nil && len(r.restartTimes) > 0 {
				r.restartTimes[len(r.restartTimes)-1].backUS = us
			}
			r.logf("database restarted and reachable")

		case <-progress.C:
			r.progress(ctx)

		case <-end.C:
			killC, terminateC = nil, nil
			r.logf("kills stop after %d; waiting up to %v for the inbox to drain", r.kills, c.drain)
			drainDeadline = time.Now().Add(c.drain)
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			drainC = tick.C

		case <-drainC:
			qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			cn, err := r.t.counts(qctx, r.db)
			cancel()
			if err == nil && cn.Produced == c.rows() && cn.Queued == 0 {
				finalCounts = cn
				break loop
			}
			if time.Now().After(drainDeadline) {
				r.logf("the inbox did not drain within %v: %+v (%v)", c.drain, cn, err)
				break loop
			}
		}
	}
	drained = true
	r.logf("drained: %d rows handled in %d handlings; stopping the workers", finalCounts.Handled, finalCounts.Handlings)
	r.stopAll()
	if restarting {
		// A restart still under way ends before the verdict.
		select {
		case err := <-restarted:
			if err == nil {
				r.restarts++
			}
		case <-time.After(3 * time.Minute):
		}
	}
	r.records.Wait()
	r.terminating.Wait()
	return r.verdict(ctx)
}

// stopAll asks every process to stop (SIGTERM: workers finish their
// handlers) and kills the ones that do not within 30 s.
func (r *soakRun) stopAll() {
	var live []*soakProc
	for _, p := range append(r.workers, r.producer) {
		if p == nil || p.killed {
			continue
		}
		select {
		case <-p.done:
			continue
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		live = append(live, p)
	}
	deadline := time.After(30 * time.Second)
	for _, p := range live {
		select {
		case <-p.done:
		case <-deadline:
			r.logf("process %d did not stop within 30s of SIGTERM: killing it", p.cmd.Process.Pid)
			r.kill(p)
		}
	}
}

func (r *soakRun) progress(ctx context.Context) {
	qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	cn, err := r.t.counts(qctx, r.db)
	if err != nil {
		r.logf("progress: the database does not answer: %v", err)
		return
	}
	r.logf("produced=%d/%d handled=%d queued=%d handlings=%d kills=%d db_restarts=%d terminated=%d",
		cn.Produced, r.c.rows(), cn.Handled, cn.Queued, cn.Handlings, r.kills, r.restarts, r.terminated.Load())
}

// verdict reads the verdict from the records, waiting for the database if it
// is still coming back, prints the key=value line and fails the run on a
// lost row, an overlap, or a soak that did not test what it says.
func (r *soakRun) verdict(ctx context.Context) error {
	var v soakVerdict
	var err error
	for deadline := time.Now().Add(time.Minute); ; {
		qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		v, err = r.t.verdict(qctx, r.db)
		cancel()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		return fmt.Errorf("read the verdict: %w", err)
	}
	c := &r.c
	// A Postgres restart ends every session at once, and the row lock or
	// advisory lock of a handler still running with it: another claimer may
	// take the row while that handler runs on (README, "What goes wrong").
	// Only the lease form, whose hold is written in the row, keeps it
	// through a restart. For the lock forms such pairs are counted apart
	// (restart_overlaps); every other overlap fails the soak.
	restartOverlaps := int64(0)
	if v.Overlaps > 0 {
		pairs, err := r.t.overlaps(ctx, r.db)
		if err != nil {
			return fmt.Errorf("read the overlapping handlings: %w", err)
		}
		for _, p := range pairs {
			cause := ""
			if c.form != "lease" && slices.ContainsFunc(r.restartTimes, p.spans) {
				restartOverlaps++
				cause = " (the first handling's lock ended with the database restart)"
			}
			r.logf("overlap: %s%s", p, cause)
		}
	}
	overlaps := v.Overlaps - restartOverlaps
	r.logf("produced=%d lost=%d queued=%d overlaps=%d restart_overlaps=%d redelivered=%d max_killed_wait=%v max_wait_any_redelivery=%v orphans=%d unexpected_exits=%d",
		v.Produced, v.Lost, v.Queued, overlaps, restartOverlaps, v.Redelivered, time.Duration(v.MaxKilledWaitUS)*time.Microsecond,
		time.Duration(v.MaxWaitUS)*time.Microsecond, v.Orphans, r.unexpected)
	line := fmt.Sprintf("form=%s db=%s processes=%d jobs=%d kills=%d db_restarts=%d lost=%d overlaps=%d restart_overlaps=%d redelivered=%d max_redelivery_wait_ms=%d",
		c.form, r.d, c.processes, c.jobs, r.kills, r.restarts, v.Lost, overlaps, restartOverlaps, v.Redelivered, v.MaxKilledWaitUS/1000)
	var why []string
	if c.limit > 0 {
		more, failed, err := r.limitVerdict(ctx)
		if err != nil {
			return fmt.Errorf("read the limit's verdict: %w", err)
		}
		line += more
		why = append(why, failed...)
	}
	if c.workflow != "" {
		more, failed, err := r.workflowVerdict(ctx)
		if err != nil {
			return fmt.Errorf("read the workflow's verdict: %w", err)
		}
		line += more
		why = append(why, failed...)
	}
	fmt.Println(line)
	if v.Lost > 0 {
		why = append(why, fmt.Sprintf("%d rows lost", v.Lost))
	}
	if overlaps > 0 {
		why = append(why, fmt.Sprintf("%d overlapping handlings", overlaps))
	}
	if v.Produced != c.rows() {
		why = append(why, fmt.Sprintf("the producer wrote %d of %d rows", v.Produced, c.rows()))
	}
	if v.Orphans > 0 {
		why = append(why, fmt.Sprintf("%d handlings of rows the producer never recorded", v.Orphans))
	}
	if r.unexpected > 0 {
		why = append(why, fmt.Sprintf("%d processes exited without being told to", r.unexpected))
	}
	if c.tx {
		n, err := sentNotOnce(ctx, r.db, r.t)
		if err != nil {
			return fmt.Errorf("read the sent rows: %w", err)
		}
		fmt.Printf("tx=true effect_outside_tx=%v sent_not_once=%d\n", c.outside, n)
		if n > 0 {
			why = append(why, fmt.Sprintf("%d rows without exactly one sent row", n))
		}
	}
	if c.restartDB && r.restarts == 0 {
		why = append(why, "the database restart asked for did not happen")
	}
	if len(why) > 0 {
		return fmt.Errorf("%w: %s", errSoakFailed, strings.Join(why, "; "))
	}
	return nil
}

// restartServer runs the restart command (with sh -c), then waits until
// the database answers again.
func restartServer(ctx context.Context, command string, db *sql.DB) error {
	out, err := exec.CommandContext(ctx, "sh", "-c", command).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", command, err, strings.TrimSpace(string(out)))
	}
	for deadline := time.Now().Add(2 * time.Minute); ; {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := db.PingContext(pctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.Join(errors.New("the database did not come back within two minutes"), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
