package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/migrations"
)

func init() {
	register("migrate", "create the reference inbox table (on Postgres with its block sequence, and with --trigger its notify trigger)", migrate)
}

func migrate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	db := fs.String("db", "", "database URL (required)")
	table := fs.String("table", "", "inbox table to create (required)")
	trigger := fs.Bool("trigger", false, "also install the notify trigger: one NOTIFY per INSERT statement, so rows written by plain SQL wake listening subscriptions at once (Postgres only)")
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
	if *trigger && b.Dialect() != "postgres" {
		return fmt.Errorf("--trigger needs Postgres: %s has no LISTEN/NOTIFY", b.Dialect())
	}
	if err := migrations.Apply(ctx, b.DB(), *table); err != nil {
		return err
	}
	fmt.Printf("table %s is in place on %s\n", *table, b.Dialect())
	if *trigger {
		if err := migrations.ApplyNotifyTrigger(ctx, b.DB(), *table); err != nil {
			return err
		}
		fmt.Printf("notify trigger of %s is in place\n", *table)
	}
	return nil
}
