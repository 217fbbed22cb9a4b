package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/migrations"
)

func init() { builders = append(builders, addMigrate) }

func addMigrate(root *cobra.Command) {
	var db, table string
	var trigger, asJSON bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "create the reference inbox table (on Postgres with its block sequence, and with --trigger its notify trigger)",
		Long: `Creates the reference inbox table (migrations.Apply), and the database when it is a SQLite
file that does not exist yet. Idempotent.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			b, err := inbox.Open(db)
			if err != nil {
				return err
			}
			defer b.Close()
			if trigger && b.Dialect() != "postgres" {
				return fmt.Errorf("--trigger needs Postgres: %s has no LISTEN/NOTIFY", b.Dialect())
			}
			if err := migrations.Apply(ctx, b.DB(), table); err != nil {
				return err
			}
			if trigger {
				if err := migrations.ApplyNotifyTrigger(ctx, b.DB(), table); err != nil {
					return err
				}
			}
			s := &opSession{flags: &opFlags{json: asJSON}, out: cmd.OutOrStdout()}
			return s.emit(migrateJSON{Dialect: b.Dialect(), Table: table, Trigger: trigger}, func(w io.Writer) {
				fmt.Fprintf(w, "table %s is in place on %s\n", table, b.Dialect())
				if trigger {
					fmt.Fprintf(w, "notify trigger of %s is in place\n", table)
				}
			})
		},
	}
	cmd.Flags().StringVar(&db, "db", "", "database URL: postgres://..., mysql://... or sqlite:///path.db (required)")
	cmd.Flags().StringVar(&table, "table", "", "inbox table to create (required)")
	cmd.Flags().BoolVar(&trigger, "trigger", false, "also install the notify trigger: one NOTIFY per INSERT statement, so rows written by plain SQL wake listening subscriptions at once (Postgres only)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of text (see docs/operating.md)")
	_ = cmd.MarkFlagRequired("db")
	_ = cmd.MarkFlagRequired("table")
	root.AddCommand(cmd)
}
