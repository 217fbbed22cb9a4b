package benchkit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/lock"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// KeyedRow is Row with the key column KeyRows adds: what a handler that
// limits itself per customer reads.
type KeyedRow struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Attempts    int        `db:"attempts" inbox:"attempts"`
	Customer    string     `db:"customer"`
}

// RetryLockDelay is how long a row whose customer's lock is held waits
// before it is tried again, in the run-then-retry drain (Config.RetryLock).
const RetryLockDelay = 50 * time.Millisecond

// errHeld is the error a run-then-retry handler retries its row with.
var errHeld = errors.New("the customer's lock is held")

// subscribeRetryLock subscribes the handler a user writes today to limit
// rows in work per customer without inbox.Limit: it takes a lock named
// after the row's customer with lock.MaxHolders(n) and no wait, handles the
// row and releases it; when all n places are held it returns
// inbox.RetryAfter(RetryLockDelay), the row using an attempt.
func subscribeRetryLock(ctx context.Context, b *inbox.Broker, cfg Config, tr *Tracker, sopts []inbox.SubOption) (*inbox.Subscription, func(), error) {
	if err := migrations.ApplyLocks(ctx, b.DB()); err != nil {
		return nil, nil, err
	}
	store, err := lock.NewSQL(ctx, b.DB())
	if err != nil {
		return nil, nil, err
	}
	locker, err := lock.New(store, lock.Namespace("bench"))
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	q, err := inbox.NewQueue[KeyedRow](cfg.Table)
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	handler := func(ctx context.Context, r KeyedRow) error {
		h, ok, err := locker.Take(ctx, "customer:"+r.Customer, lock.MaxHolders(cfg.RetryLock), lock.TTL(time.Minute))
		if err != nil {
			return err
		}
		if !ok {
			return inbox.RetryAfter(RetryLockDelay, errHeld)
		}
		tr.Handle(r.ID)
		if err := locker.Release(ctx, h.Token); err != nil {
			return fmt.Errorf("release the lock of customer %s: %w", r.Customer, err)
		}
		return nil
	}
	// Rows come back until their customer's lock frees: enough attempts
	// that none is parked.
	sopts = append(sopts, inbox.MaxAttempts(1_000_000))
	sub, err := inbox.Subscribe(b, q, handler, sopts...)
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	return sub, func() { store.Close() }, nil
}
