package dialect_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// A ticket is the next run of blocks of the sequence, apart from every
// other; it is moved up to the least block the claimer asks for when the
// sequence is behind, and set back to it when the sequence is past every
// row, so no block of rows is passed over.
func TestTicketKeepsToTheRows(t *testing.T) {
	ctx := context.Background()
	db := testdb.Open(t, testdb.Postgres(t))
	if err := migrations.Apply(ctx, db, "ticket_jobs"); err != nil {
		t.Fatal(err)
	}
	// Rows in blocks 0 to 4.
	if _, err := db.ExecContext(ctx, "INSERT INTO ticket_jobs (payload) SELECT 'x' FROM generate_series(1, $1::int)", 5*dialect.BlockIDs-1); err != nil {
		t.Fatal(err)
	}
	seq, err := dialect.Of(dialect.Postgres).BlockSequence(ctx, db, "ticket_jobs")
	if err != nil || !strings.HasSuffix(seq, `."ticket_jobs_claim_blocks"`) {
		t.Fatalf("block sequence %q, %v", seq, err)
	}
	q := dialect.Of(dialect.Postgres).Inbox(dialect.Table{Name: `"ticket_jobs"`, ID: `"id"`, LockedUntil: `"locked_until"`, Blocks: seq},
		dialect.Times{Kind: dialect.Postgres, Encoding: dialect.Timestamptz})
	ticket := func(least, n int64) int64 {
		t.Helper()
		var b int64
		c := q.Ticket.Call(least, n)
		if err := db.QueryRowContext(ctx, c.SQL, c.Args...).Scan(&b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, step := range []struct {
		what        string
		setval      int64 // set the sequence first, when not zero
		least, want int64
		n           int64 // blocks in a row; 0 is 1
	}{
		{what: "a new sequence starts at block 0", least: 0, want: 0},
		{what: "the next ticket is apart", least: 0, want: 1},
		{what: "behind the least block asked for: moved up to it", least: 3, want: 3},
		{what: "ahead of it but among the rows: the next", least: 2, want: 4},
		{what: "past every row: set back to the least block asked for", least: 2, want: 2},
		{what: "far past every row: set back", setval: 1000, least: 1, want: 1},
		{what: "negative blocks, for negative ids", setval: -50, least: -7, want: -7},
		{what: "a run of three blocks: its first", least: -10, n: 3, want: -6},
		{what: "the next ticket is past the run", least: -10, want: -3},
		{what: "a run behind the least block asked for: moved up to it", least: 1, n: 2, want: 1},
		{what: "and the next past that run", least: 0, want: 3},
	} {
		if step.setval != 0 {
			if _, err := db.ExecContext(ctx, "SELECT setval('ticket_jobs_claim_blocks', $1)", step.setval); err != nil {
				t.Fatal(err)
			}
		}
		if got := ticket(step.least, step.n); got != step.want {
			t.Errorf("%s: ticket(%d, %d) = %d, want %d", step.what, step.least, step.n, got, step.want)
		}
	}
}

// Claim blocks are a Postgres object, made with the reference table or on
// their own: idempotent, dropped with the table, nothing on SQLite, and no
// statement for a table whose claims go by priority.
func TestApplyClaimBlocks(t *testing.T) {
	ctx := context.Background()
	db := testdb.Open(t, testdb.Postgres(t))
	if _, err := db.ExecContext(ctx, "CREATE TABLE made_jobs (job_id bigint PRIMARY KEY, locked_until timestamptz, payload bytea)"); err != nil {
		t.Fatal(err)
	}
	d := dialect.Of(dialect.Postgres)
	if seq, err := d.BlockSequence(ctx, db, "made_jobs"); err != nil || seq != "" {
		t.Fatalf("a table of the user's own: block sequence %q, %v; want none before ApplyClaimBlocks", seq, err)
	}
	if err := migrations.ApplyClaimBlocks(ctx, db, "made_jobs", "no_such_column"); err == nil {
		t.Error("ApplyClaimBlocks with an id column the table lacks: no error")
	} else if seq, _ := d.BlockSequence(ctx, db, "made_jobs"); seq != "" {
		t.Errorf("ApplyClaimBlocks failed (%v) and left a block sequence behind", err)
	}
	for range 2 {
		if err := migrations.ApplyClaimBlocks(ctx, db, "made_jobs", "job_id"); err != nil {
			t.Fatal(err)
		}
	}
	if seq, err := d.BlockSequence(ctx, db, "made_jobs"); err != nil || seq == "" {
		t.Fatalf("after ApplyClaimBlocks: block sequence %q, %v", seq, err)
	}
	tm := dialect.Times{Kind: dialect.Postgres, Encoding: dialect.Timestamptz}
	byPriority := d.Inbox(dialect.Table{Name: `"made_jobs"`, ID: `"id"`, LockedUntil: `"locked_until"`, Priority: `"priority"`, Blocks: `"made_jobs_claim_blocks"`}, tm)
	if byPriority.Ticket.SQL() != "" || byPriority.ClaimBlock.SQL() != "" {
		t.Errorf("a table claimed by priority got block statements: %q", byPriority.Ticket.SQL())
	}
	if _, err := db.ExecContext(ctx, "DROP TABLE made_jobs"); err != nil {
		t.Fatal(err)
	}
	if seq, err := d.BlockSequence(ctx, db, "made_jobs"); err != nil || seq != "" {
		t.Errorf("after DROP TABLE: block sequence %q, %v; want it dropped with the table", seq, err)
	}

	// A sequence of that name that claims could not use is not taken:
	// made by hand with the default least value 1 (tickets set it to
	// blocks below), or left by a table renamed (it is the renamed one's).
	for _, c := range []struct{ what, ddl string }{
		{"made by hand", "CREATE TABLE hand_jobs (id bigint PRIMARY KEY, locked_until timestamptz, payload bytea); CREATE SEQUENCE hand_jobs_claim_blocks OWNED BY hand_jobs.id"},
		{"a renamed table's", "CREATE TABLE old_jobs (id bigint PRIMARY KEY, locked_until timestamptz, payload bytea); CREATE SEQUENCE old_jobs_claim_blocks AS bigint MINVALUE -9223372036854775808 START WITH 0 OWNED BY old_jobs.id; ALTER TABLE old_jobs RENAME TO older_jobs; CREATE TABLE old_jobs (id bigint PRIMARY KEY, locked_until timestamptz, payload bytea)"},
	} {
		if _, err := db.ExecContext(ctx, c.ddl); err != nil {
			t.Fatal(err)
		}
		table := strings.Fields(c.ddl)[2]
		if seq, err := d.BlockSequence(ctx, db, table); err != nil || seq != "" {
			t.Errorf("a sequence %s: block sequence %q, %v; want none", c.what, seq, err)
		}
	}

	// A name whose sequence's would be cut to 63 bytes: the reference
	// table comes without one, and asking for it says why.
	long := strings.Repeat("j", 51)
	if err := migrations.Apply(ctx, db, long); err != nil {
		t.Fatalf("the reference table named %d bytes: %v", len(long), err)
	}
	if seq, err := d.BlockSequence(ctx, db, long); err != nil || seq != "" {
		t.Errorf("a table named %d bytes: block sequence %q, %v; want none", len(long), seq, err)
	}
	if err := migrations.ApplyClaimBlocks(ctx, db, long, "id"); err == nil {
		t.Errorf("ApplyClaimBlocks on a table named %d bytes: no error", len(long))
	}

	lite := testdb.Open(t, testdb.SQLite(t))
	if err := migrations.Apply(ctx, lite, "made_jobs"); err != nil {
		t.Fatalf("the reference table on SQLite: %v", err)
	}
	if err := migrations.ApplyClaimBlocks(ctx, lite, "made_jobs", "id"); err != nil {
		t.Errorf("ApplyClaimBlocks on SQLite, where there is nothing to make: %v", err)
	}
	if err := migrations.ApplyClaimBlocks(ctx, lite, "made jobs", "id"); err == nil {
		t.Error("ApplyClaimBlocks of a bad table name on SQLite: no error")
	}
}
