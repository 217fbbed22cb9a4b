package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
)

func init() {
	register("stats", "count a queue's rows by state: available, leased or delayed, parked", stats)
}

func stats(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	db := fs.String("db", "", "database URL (required)")
	table := fs.String("table", "", "inbox table (required)")
	group := fs.String("group", "", "count only this group (the table needs the reference table's group_name column)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *db == "" || *table == "" {
		return fmt.Errorf("--db and --table are required")
	}
	b, err := inbox.Open(*db)
	if err != nil {
		return err
	}
	defer b.Close()
	q, err := inbox.NewQueue[referenceRow](*table)
	if err != nil {
		return err
	}
	if *group != "" {
		q = q.Group(*group)
	}
	c, err := inbox.Count(ctx, b, q)
	if err != nil {
		return err
	}
	fmt.Printf("table=%s group=%q available=%d leased_or_delayed=%d parked=%d\n", *table, *group, c.Available, c.Held, c.Parked)
	return nil
}

// referenceRow is the reference table's shape (migrations.Apply).
type referenceRow struct {
	ID          int64      `db:"id" inbox:"id,generated"`
	LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
	Payload     []byte     `db:"payload" inbox:"payload"`
	Group       string     `db:"group_name" inbox:"group"`
}
