package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/claim/contract"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/notify"
)

// DefaultCancelPoll is RegistryCancelPoll's default.
const DefaultCancelPoll = 200 * time.Millisecond

// RegistryCancelPoll is how often a registered instance whose broker does
// not listen for notifications (SQLite, MariaDB/MySQL, Postgres without
// ListenNotify) reads the cancel requests (Operator.Cancel) while one of
// its handlers runs: a canceled handler's context ends within about that
// much. An instance that listens reads them when a cancel is announced,
// and at its heartbeat in case a notification was missed; one in the
// process of the cancel (a SQLite database in memory shared by several
// brokers) is told at once. Default: DefaultCancelPoll (200ms). Bound: at
// least 10ms.
func RegistryCancelPoll(d time.Duration) RegistryOption {
	return func(c *registryConfig) error {
		if d < minHeartbeat {
			return fmt.Errorf("inbox: %w: RegistryCancelPoll(%v); give at least 10ms, or leave the option out for the default %v", ErrInvalid, d, DefaultCancelPoll)
		}
		c.cancelPoll = d
		return nil
	}
}

// cancelWatch ends the contexts of the instance's handlers whose rows an
// operator canceled: it reads the requests when one is announced (the hub,
// NOTIFY) and, while a handler runs, at its poll. Reading them costs
// nothing on a job's path: the engine finds the handler of a row among its
// workers' watches.
type cancelWatch struct {
	r       *registry
	sql     dialect.CancelsSQL
	failing bool // the last read failed; logged once until one works
	stopped chan struct{}
}

// start starts the watch, which stops with ctx.
func (c *cancelWatch) start(ctx context.Context, r *registry) {
	c.r, c.sql, c.stopped = r, r.b.d.Cancels(), make(chan struct{})
	wake := r.b.hub.Subscribe(dialect.CancelChannel, "")
	every := r.cfg.cancelPoll
	if r.b.listener != nil {
		r.b.listener.Listen(dialect.CancelChannel)
		every = max(every, r.cfg.heartbeat)
	}
	go c.loop(ctx, wake, every)
}

func (c *cancelWatch) loop(ctx context.Context, wake *notify.Waiter, every time.Duration) {
	defer close(c.stopped)
	defer wake.Close()
	t := c.r.b.clock.NewTimer(every)
	defer func() { t.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			t = c.r.b.clock.NewTimer(every)
		case <-wake.C():
		}
		if c.running() {
			c.read(ctx)
		}
	}
}

// running says whether a handler of the service runs.
func (c *cancelWatch) running() bool {
	for _, sub := range c.r.svc.subs {
		if e := sub.eng.Load(); e != nil && e.Running() {
			return true
		}
	}
	return false
}

// read reads the requests and cancels the handlers of their rows that run
// here.
func (c *cancelWatch) read(ctx context.Context) {
	err := c.cancelListed(ctx)
	switch {
	case err != nil && ctx.Err() == nil && !c.failing:
		c.r.log.Warn("inbox: could not read the cancel requests; trying again at the next poll (did migrations.ApplyRegistry run since this version?)", "err", err)
		c.failing = true
	case err == nil && c.failing:
		c.r.log.Info("inbox: the cancel requests are read again")
		c.failing = false
	}
}

func (c *cancelWatch) cancelListed(ctx context.Context) error {
	rows, err := c.r.b.db.QueryContext(ctx, c.sql.List.Call().SQL)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var table, action, reason string
		var id int64
		if err := rows.Scan(&table, &id, &action, &reason); err != nil {
			return err
		}
		for _, sub := range c.r.svc.subs {
			if e := sub.eng.Load(); e != nil && sub.table == table {
				e.Cancel(id, &CancelCause{Delete: action == dialect.CancelDelete, Reason: reason})
			}
		}
	}
	return rows.Err()
}

// done deletes the request of row id of table once the instance parked or
// deleted the row. One left behind (this fails, the process dies) is
// pruned by the next cancel or unpark of the table.
func (c *cancelWatch) done(table string, id int64) {
	ctx, cancel := context.WithTimeout(context.Background(), contract.SettleTimeout)
	defer cancel()
	q := c.sql.Done.Call(table, id)
	err := c.r.b.write(ctx, false, func(ex execer) error {
		_, err := ex.ExecContext(ctx, q.SQL, q.Args...)
		return err
	})
	if err != nil {
		c.r.log.Warn("inbox: could not delete a done cancel request; the next cancel or unpark of its table prunes it", "table", table, "id", id, "err", err)
	}
}
