package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/internal/benchkit"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/notify"
)

// benchPublish writes --rows rows with inbox.PublishMany, then the same
// rows the bare way (COPY on Postgres, multi-row INSERTs on MySQL, a
// prepared INSERT a row in one transaction on SQLite), on MySQL also with
// LOAD DATA LOCAL INFILE, and prints them; the last line is key=value.
func benchPublish(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench publish", flag.ContinueOnError)
	db := fs.String("db", "", "database URL (required)")
	rows := fs.Int("rows", 100000, "rows to publish")
	batch := fs.Int("batch", 10000, "rows a PublishMany call (and a COPY)")
	table := fs.String("table", "bench_publish", "table to (re)create")
	runs := fs.Int("runs", 3, "runs of each; the best is printed")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	if *db == "" || *rows < 1 || *batch < 1 || *runs < 1 {
		return fmt.Errorf("--db is required; --rows, --batch and --runs must be positive")
	}
	if err := dialect.CheckTableName(*table); err != nil {
		return fmt.Errorf("--table: %w", err)
	}
	b, err := inbox.Open(*db, inbox.WithHub(notify.NewHub()))
	if err != nil {
		return err
	}
	defer b.Close()
	var lib, bare, load benchkit.Published
	mysqlDB := dbKind(*db) == "mysql"
	for i := range *runs {
		p, err := benchkit.Publish(ctx, b, *table, *rows, *batch)
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		c, err := benchkit.Bare(ctx, b.DB(), *db, *table, *rows, *batch)
		if err != nil {
			return fmt.Errorf("bare: %w", err)
		}
		fmt.Fprintf(os.Stderr, "run %d: PublishMany %.0f rows/s, bare %.0f rows/s\n", i+1, p.RowsPerSec, c.RowsPerSec)
		if mysqlDB {
			l, err := benchkit.LoadData(ctx, b.DB(), *table, *rows, *batch)
			if err != nil {
				return fmt.Errorf("load data (the server must allow it: local_infile=ON): %w", err)
			}
			fmt.Fprintf(os.Stderr, "run %d: LOAD DATA LOCAL %.0f rows/s\n", i+1, l.RowsPerSec)
			if l.RowsPerSec > load.RowsPerSec {
				load = l
			}
		}
		if p.RowsPerSec > lib.RowsPerSec {
			lib = p
		}
		if c.RowsPerSec > bare.RowsPerSec {
			bare = c
		}
	}
	bareName := "copy"
	switch dbKind(*db) {
	case "sqlite":
		bareName = "insert_tx"
	case "mysql":
		bareName = "multirow_insert"
	}
	loadData := ""
	if mysqlDB {
		loadData = fmt.Sprintf(" load_data_rows_per_sec=%.0f vs_load_data=%.2f", load.RowsPerSec, lib.RowsPerSec/load.RowsPerSec)
	}
	fmt.Printf("db=%s rows=%d batch=%d seconds=%.3f rows_per_sec=%.0f cpu_us_per_row=%.2f bare=%s bare_seconds=%.3f bare_rows_per_sec=%.0f vs_bare=%.2f%s runs=%d\n",
		dbKind(*db), *rows, *batch, lib.Seconds, lib.RowsPerSec, lib.CPUPerRow(), bareName, bare.Seconds, bare.RowsPerSec, lib.RowsPerSec/bare.RowsPerSec, loadData, *runs)
	return nil
}
