package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// On Postgres a row that a transaction holds (as a row-lock handler does
// while it runs) is in work: the operator's changes skip it at once instead
// of waiting for the handler, and change the others.
func TestOperatorSkipsRowsInWork(t *testing.T) {
	b := open(t, inboxtest.Postgres(t))
	ctx := context.Background()
	insert(t, b.DB(), 3)
	tx, err := b.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var held int64
	if err := tx.QueryRow("SELECT id FROM jobs ORDER BY id LIMIT 1 FOR UPDATE").Scan(&held); err != nil {
		t.Fatal(err)
	}
	op := inbox.NewOperator(b)
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := op.Delete(dctx, inbox.QueueRef{Table: "jobs"}, inbox.Selection{All: true})
	if err != nil {
		t.Fatalf("delete beside a row in work: %v (it waited for the holder)", err)
	}
	if n != 2 {
		t.Fatalf("deleted %d rows, want the 2 not in work", n)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := rows(t, b.DB()); got != 1 {
		t.Fatalf("%d rows left, want the one that was in work", got)
	}
}
