package inbox_test

import (
	"context"
	"fmt"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// Publishing in the transaction that writes the business row: the job is
// queued if and only if the order is committed. PublishTx takes a *sql.Tx,
// a *sqlx.Tx or a pgx.Tx.
func ExamplePublishTx() {
	ctx := context.Background()
	b, err := inbox.Open("sqlite://:memory:")
	if err != nil {
		panic(err)
	}
	defer b.Close()
	db := b.DB()
	if err := migrations.Apply(ctx, db, "invoice_jobs"); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER NOT NULL)`); err != nil {
		panic(err)
	}
	queue := inbox.MustQueue[Job]("invoice_jobs")

	placeOrder := func(id, total int, commit bool) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			panic(err)
		}
		defer tx.Rollback() // a no-op once committed
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES (?, ?)`, id, total); err != nil {
			panic(err)
		}
		payload := fmt.Appendf(nil, `{"order": %d}`, id)
		if _, err := inbox.PublishTx(ctx, b, tx, queue, Job{Payload: payload}); err != nil {
			panic(err)
		}
		if commit {
			if err := tx.Commit(); err != nil {
				panic(err)
			}
		}
	}
	placeOrder(1, 250, true)
	placeOrder(2, 990, false) // rolled back: no order, no job

	var orders int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&orders); err != nil {
		panic(err)
	}
	n, err := inbox.Count(ctx, b, queue)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d order, %d job available\n", orders, n.Available)
	// Output:
	// 1 order, 1 job available
}
