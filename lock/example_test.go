package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqlinbox/sqlinbox/lock"
)

// One call takes a lock; its token releases it or extends it.
func Example() {
	ctx := context.Background()
	store := lock.NewMemory(nil) // or lock.NewSQL(ctx, db, ...), lock.NewRedis(ctx, client, ...)
	locker, err := lock.New(store, lock.Namespace("tenant-42"))
	if err != nil {
		panic(err)
	}
	h, ok, err := locker.Take(ctx, "invoice:1001", lock.TTL(time.Minute))
	fmt.Println("first call:", ok, err, h.Fence)

	_, ok, err = locker.Take(ctx, "invoice:1001")
	fmt.Println("second call:", ok, err)

	_, _, err = locker.Take(ctx, "invoice:1001", lock.Wait(10*time.Millisecond), lock.MustAcquire())
	fmt.Println("with MustAcquire:", errors.Is(err, lock.ErrNotAcquired))

	h, err = locker.Extend(ctx, h.Token, time.Hour)
	fmt.Println("extended, same fence:", h.Fence, err)

	fmt.Println("released:", locker.Release(ctx, h.Token))
	// Output:
	// first call: true <nil> 1
	// second call: false <nil>
	// with MustAcquire: true
	// extended, same fence: 1 <nil>
	// released: <nil>
}
