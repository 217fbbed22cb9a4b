package benchkit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
)

// A drain by separate processes: the parent fills the table, starts each
// child (the same binary, in its child mode) and waits for every one to say
// "ready", then writes "go" to all and starts the clock. A child runs its
// subscription and writes "acked N claims M" every slowTick; once the
// drain nears its end (see nearing), the parent writes "near" to each, and
// they report every fastTick; the clock stops
// when the counts add up to the rows filled. Closing a child's stdin stops
// it; it then writes "done handled=H acked=A claims=C" and exits.
// Handlings beyond the rows filled are duplicates; the rows left in the
// table, lost.
//
// The reports are the harness's own load, and it grows with the children:
// at fastTick throughout, eight children would slow the drain they
// measure, so a child reports at slowTick until the end is near.

// slowTick and fastTick are how often a child reports before and after the
// parent's "near"; nearEnd is the share of the rows left when it is sent.
const (
	slowTick = 50 * time.Millisecond
	fastTick = 2 * time.Millisecond
	nearEnd  = 0.05
)

// warmShare is the share of the rows a drain's warm figure leaves out, the
// first acked: by then every child has checked the table and opened its
// connections, as instances already running when a backlog arrives have
// (eight children starting at once take longer to than two).
const warmShare = 0.1

// Child is one process's share of a drain.
type Child interface {
	Run(ctx context.Context) error
	// Counts are the handlings, acks and claim statements so far.
	Counts() (handled, acked, claims int64)
}

// ServeChild speaks the child's side of the protocol on in and out.
func ServeChild(ctx context.Context, in io.Reader, out io.Writer, c Child) error {
	lines := bufio.NewScanner(in)
	if _, err := fmt.Fprintln(out, "ready"); err != nil {
		return err
	}
	if !lines.Scan() || lines.Text() != "go" {
		return fmt.Errorf("bench child: no go from the parent")
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	// The parent says "near" as the drain ends, and closes stdin to stop it.
	near := make(chan struct{})
	go func() {
		said := false
		for lines.Scan() {
			if lines.Text() == "near" && !said {
				said = true
				close(near)
			}
		}
		stop()
	}()
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	tick := time.NewTicker(slowTick)
	defer tick.Stop()
	w := bufio.NewWriter(out)
	var runErr error
loop:
	for {
		select {
		case <-near:
			near = nil
			tick.Reset(fastTick)
		case <-tick.C:
			_, acked, claims := c.Counts()
			fmt.Fprintf(w, "acked %d claims %d\n", acked, claims)
			w.Flush()
		case runErr = <-done:
			break loop
		}
	}
	h, a, cl := c.Counts()
	fmt.Fprintf(w, "done handled=%d acked=%d claims=%d\n", h, a, cl)
	w.Flush()
	if errors.Is(runErr, context.Canceled) {
		runErr = nil
	}
	return runErr
}

// LibChild is a child that drains with the library: one broker, one
// subscription of cfg.Workers no-op handlers (cfg.Instances is ignored).
type LibChild struct {
	sub     *inbox.Subscription
	b       *inbox.Broker
	handled atomic.Int64
}

// NewLibChild opens the broker and subscribes; Close closes the broker.
func NewLibChild(cfg Config) (*LibChild, error) {
	q, err := inbox.NewQueue[Row](cfg.Table)
	if err != nil {
		return nil, err
	}
	var opts []inbox.Option
	if cfg.Conns > 0 {
		opts = append(opts, inbox.MaxConns(cfg.Conns))
	}
	if cfg.Notify {
		opts = append(opts, inbox.ListenNotify())
	}
	b, err := inbox.Open(cfg.URL, opts...)
	if err != nil {
		return nil, err
	}
	c := &LibChild{b: b}
	pool := b.DB()
	err = Warm(pool.Stats().MaxOpenConnections, func() (func(), error) {
		conn, err := pool.Conn(context.Background())
		if err != nil {
			return nil, err
		}
		return func() { conn.Close() }, conn.PingContext(context.Background())
	})
	if err != nil {
		b.Close()
		return nil, err
	}
	sopts := []inbox.SubOption{inbox.Workers(cfg.Workers), inbox.ShutdownTimeout(10 * time.Second)}
	if cfg.Form != nil {
		sopts = append(sopts, inbox.Form(cfg.Form))
	}
	c.sub, err = inbox.Subscribe(b, q, func(context.Context, Row) error {
		c.handled.Add(1)
		return nil
	}, sopts...)
	if err != nil {
		b.Close()
		return nil, err
	}
	return c, nil
}

func (c *LibChild) Run(ctx context.Context) error { return c.sub.Run(ctx) }
func (c *LibChild) Close()                        { c.b.Close() }
func (c *LibChild) Counts() (handled, acked, claims int64) {
	st := c.sub.Stats()
	return c.handled.Load(), st.Acked, st.Claims
}

// Warm opens n connections, holding each until all are open, and gives
// them back before a child says ready: its drain starts with its pool open,
// as an instance running when a backlog comes has. get takes one
// connection and returns what gives it back.
func Warm(n int, get func() (release func(), err error)) error {
	var releases []func()
	defer func() {
		for _, r := range releases {
			r()
		}
	}()
	for range n {
		release, err := get()
		if release != nil {
			releases = append(releases, release)
		}
		if err != nil {
			return fmt.Errorf("bench child: open the pool's connections: %w", err)
		}
	}
	return nil
}

// ProcsConfig is one drain by separate processes.
type ProcsConfig struct {
	// Commands are the children, not started; each must run ServeChild.
	Commands []*exec.Cmd
	Jobs     int
	Timeout  time.Duration // zero: ten minutes
	Progress io.Writer     // a line a second, or nil
	// During, if set, runs while the clock runs, until its context ends
	// (a sampler of the database's wait events).
	During func(ctx context.Context)
}

// ProcsResult is what a drain by processes measured.
type ProcsResult struct {
	Result
	Handled int64 // handlings in all; beyond Jobs, duplicates
	// WarmJobsPerSec is the rate from the moment warmShare of the rows were
	// acked to the end (see warmShare): the drain of processes already
	// running. The moment is interpolated between the parent's readings of
	// the children's reports, which come slowTick apart each, so it can be
	// late by up to slowTick (a higher rate by about slowTick/2 over the
	// drain's time, under 1% in a drain of 4 s). Zero for a drain that did
	// not finish.
	WarmJobsPerSec float64
}

type childProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Scanner
	acked  atomic.Int64
	claims atomic.Int64
	final  chan string // the done line
	ended  atomic.Bool // its stdout ended: it exited, or is exiting
	stderr strings.Builder
}

// DrainProcs runs the children until their acks add up to cfg.Jobs.
func DrainProcs(ctx context.Context, cfg ProcsConfig) (ProcsResult, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Minute
	}
	var kids []*childProc
	defer func() {
		for _, k := range kids {
			k.stdin.Close()
			_ = k.cmd.Wait()
		}
	}()
	for _, cmd := range cfg.Commands {
		k := &childProc{cmd: cmd, final: make(chan string, 1)}
		var err error
		if k.stdin, err = cmd.StdinPipe(); err != nil {
			return ProcsResult{}, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return ProcsResult{}, err
		}
		cmd.Stderr = &k.stderr
		if err := cmd.Start(); err != nil {
			return ProcsResult{}, fmt.Errorf("start bench child: %w", err)
		}
		k.lines = bufio.NewScanner(out)
		kids = append(kids, k)
	}
	for i, k := range kids {
		if !k.lines.Scan() || k.lines.Text() != "ready" {
			k.stdin.Close()
			err := k.cmd.Wait() // its stderr is complete once it is waited for
			kids = slices.Delete(kids, i, i+1)
			return ProcsResult{}, fmt.Errorf("bench child %d did not start (%v): %s", i, err, k.stderr.String())
		}
	}
	for _, k := range kids {
		go k.read()
	}
	start, cpu0 := time.Now(), MachineCPU()
	for _, k := range kids {
		if _, err := io.WriteString(k.stdin, "go\n"); err != nil {
			return ProcsResult{}, err
		}
	}
	dctx, stopDuring := context.WithCancel(ctx)
	var during sync.WaitGroup
	if cfg.During != nil {
		during.Go(func() { cfg.During(dctx) })
	}
	took, warm, failed := waitAcked(ctx, cfg, kids, start)
	cpu := cpuSince(cpu0)
	stopDuring()
	during.Wait()
	var res ProcsResult
	for i, k := range kids {
		k.stdin.Close()
		line := ""
		select {
		case line = <-k.final:
		case <-time.After(30 * time.Second):
		}
		err := k.cmd.Wait()
		if err != nil || line == "" {
			failed = errors.Join(failed, fmt.Errorf("bench child %d: %v: %s", i, err, k.stderr.String()))
			continue
		}
		f := fields(line)
		res.Handled += f["handled"]
		res.Claims += f["claims"]
	}
	kids = nil
	res.Seconds, res.JobsPerSec, res.MachineCPU = took.Seconds(), float64(cfg.Jobs)/took.Seconds(), cpu
	if warm >= 0 && warm < took {
		res.WarmJobsPerSec = float64(cfg.Jobs-warmRows(cfg.Jobs)) / (took - warm).Seconds()
	}
	return res, failed
}

func (k *childProc) read() {
	for k.lines.Scan() {
		t := k.lines.Text()
		if strings.HasPrefix(t, "done ") {
			k.final <- t
			continue
		}
		var a, c int64
		if _, err := fmt.Sscanf(t, "acked %d claims %d", &a, &c); err == nil {
			k.acked.Store(a)
			k.claims.Store(c)
		}
	}
	k.ended.Store(true)
	close(k.final)
}

// warmRows is how many of jobs rows a drain's warm figure leaves out.
func warmRows(jobs int) int { return int(warmShare * float64(jobs)) }

// waitAcked waits until the children's acks add up to cfg.Jobs and returns
// when, and when warmRows of them were acked (see ProcsResult), both since
// start.
func waitAcked(ctx context.Context, cfg ProcsConfig, kids []*childProc, start time.Time) (took, warm time.Duration, err error) {
	deadline := time.After(cfg.Timeout)
	tick := time.NewTicker(fastTick)
	defer tick.Stop()
	last, lastAt, near := int64(0), start, false
	warmAt, seen, seenAt := int64(warmRows(cfg.Jobs)), int64(0), time.Duration(0)
	warm = -1
	for {
		select {
		case <-tick.C:
			var n int64
			for i, k := range kids {
				n += k.acked.Load()
				if k.ended.Load() {
					return time.Since(start), warm, fmt.Errorf("bench child %d ended before the drain did", i)
				}
			}
			at := time.Since(start)
			if warm < 0 && n >= warmAt {
				warm = crossed(seen, seenAt, n, at, warmAt)
			}
			if n != seen {
				seen, seenAt = n, at
			}
			if n >= int64(cfg.Jobs) {
				return at, warm, nil
			}
			if !near && nearing(cfg.Jobs, n, time.Since(start)) {
				near = true
				for _, k := range kids {
					_, _ = io.WriteString(k.stdin, "near\n") // a child that exited is told by ended
				}
			}
			if cfg.Progress != nil && time.Since(lastAt) >= time.Second {
				now := time.Now()
				fmt.Fprintf(cfg.Progress, "  %d/%d acked, %.0f jobs/s\n", n, cfg.Jobs, float64(n-last)/now.Sub(lastAt).Seconds())
				last, lastAt = n, now
			}
		case <-deadline:
			return time.Since(start), warm, fmt.Errorf("drain by %d processes did not finish within %v", len(kids), cfg.Timeout)
		case <-ctx.Done():
			return time.Since(start), warm, ctx.Err()
		}
	}
}

// crossed is when the acks reached target, read as a straight line from
// prev acks at prevAt (the last change seen) to n at now.
func crossed(prev int64, prevAt time.Duration, n int64, now time.Duration, target int64) time.Duration {
	if n <= prev {
		return now
	}
	return prevAt + time.Duration(float64(now-prevAt)*float64(target-prev)/float64(n-prev))
}

// nearing says a drain of jobs rows with done acked after elapsed is near
// its end: nearEnd of its rows left, or, at the rate so far, less than ten
// slow reports' time (a short drain whose last rows would otherwise be
// reported slowTick apart).
func nearing(jobs int, done int64, elapsed time.Duration) bool {
	left := int64(jobs) - done
	if float64(left) <= nearEnd*float64(jobs) {
		return true
	}
	return done > 0 && time.Duration(float64(elapsed)*float64(left)/float64(done)) < 10*slowTick
}

// fields parses "k=v k=v" into integers.
func fields(line string) map[string]int64 {
	m := map[string]int64{}
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			m[k] = n
		}
	}
	return m
}
