package main

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// The soak's --tx mode: workers handle rows with inbox.HandleTx, and each
// handling inserts one row into the sent table in its transaction, beside
// the row's ack. Rows are delivered at least once (a killed worker's rows
// are handled again), but the verdict asks for exactly one sent row per
// produced row: the effect happened once.

// sentTable is the table of effects of a soak on table.
func sentTable(table string) string { return table + "_sent" }

// makeSent makes the sent table afresh: no unique index, so an effect
// committed twice would show; an index on seq, so that the verdict's
// lookups by row do not scan it.
func makeSent(ctx context.Context, db *sql.DB, d *dialect.Dialect, table string) error {
	q := d.Quote(sentTable(table))
	if err := dialect.CheckTableName(sentTable(table)); err != nil {
		return fmt.Errorf("--table: %w", err)
	}
	bare := sentTable(table)[strings.LastIndex(sentTable(table), ".")+1:]
	for _, s := range []string{"DROP TABLE IF EXISTS " + q, "CREATE TABLE " + q + " (seq bigint NOT NULL, at_us bigint NOT NULL)",
		"CREATE INDEX " + d.Quote(bare+"_seq") + " ON " + q + " (seq)"} {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("make the sent table: %w", err)
		}
	}
	return nil
}

// insertSent is the effect of a handling: $1 the row's sequence number,
// with the database's clock (the workflow mode reads it as the time of the
// row's ack, which commits with it).
func insertSent(d *dialect.Dialect, table string) string {
	return d.Rebind("INSERT INTO " + d.Quote(sentTable(table)) + " (seq, at_us) VALUES ($1, " + nowUSOf(d) + ")")
}

// sentNotOnce counts the produced rows without exactly one sent row.
func sentNotOnce(ctx context.Context, db *sql.DB, t *soakTables) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+t.qProduced+" p WHERE (SELECT count(*) FROM "+
		t.d.Quote(sentTable(t.jobs))+" s WHERE s.seq = p.seq) <> 1").Scan(&n)
	return n, err
}

// seqOf reads a soak row's sequence number from its payload.
func seqOf(payload []byte) (int64, error) {
	seq, err := strconv.ParseInt(string(payload), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("payload %q: %w", payload, err)
	}
	return seq, nil
}
