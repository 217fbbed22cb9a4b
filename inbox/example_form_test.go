package inbox_test

import (
	"context"
	"fmt"
	"os"

	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/inbox"
)

// Picking a claim form. The default, lease.Form, serves SQLite and
// Postgres; rowlock.Form and advisory.Form serve Postgres only, and
// Subscribe refuses them on SQLite. This example needs a Postgres server,
// so it is compiled but not run.
func ExampleForm() {
	b, err := inbox.Open(os.Getenv("DATABASE_URL")) // postgres://user@host:5432/db
	if err != nil {
		panic(err)
	}
	defer b.Close()
	queue := inbox.MustQueue[Job]("invoice_jobs")
	render := func(ctx context.Context, j Job) error { return nil }

	// Each claimed row is held under a Postgres row lock while its handler
	// runs: one pool connection per job in work.
	sub, err := inbox.Subscribe(b, queue, render, inbox.Form(rowlock.Form), inbox.Workers(8))
	if err != nil {
		panic(err)
	}
	fmt.Println(sub.Run(context.Background()))
}
