package advisory

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/claim"
)

// An acked row stays locked until its delete has committed: were it
// unlocked first, another session could lock it while the delete is still
// uncommitted, read it as available (the delete not yet visible) and
// handle it a second time. A deferred trigger holds each delete's commit
// open on a gate the test keeps closed; meanwhile no other session may lock
// the row and another claimer must not take it. Acks that queue behind a
// blocked one go in the next turn together, and are held the same way.
// Both ways to send an ack run: one pipelined round trip, and the two
// statements a pool whose driver is not pgx sends.
func TestAckUnlocksAfterCommit(t *testing.T) {
	for _, pipe := range []bool{true, false} {
		t.Run(fmt.Sprintf("pipelined=%t", pipe), func(t *testing.T) {
			testAckUnlocksAfterCommit(t, pipe)
		})
	}
}

// gateClass is the lock class of the test's commit gates.
var gateClass = Class("advisory settle test gate")

func testAckUnlocksAfterCommit(t *testing.T, pipelined bool) {
	a, db, url := newClaimerAt(t)
	b, err := Form.New(a.env)
	if err != nil {
		t.Fatal(err)
	}
	if !pipelined {
		a = throughWrapper(t, a, url)
	}
	ctx := context.Background()
	// The commit of a delete of row id waits for the gate (gateClass, id).
	if _, err := db.Exec(fmt.Sprintf(`
CREATE FUNCTION jobs_gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_advisory_xact_lock(%d, OLD.id::int);
	RETURN OLD;
END $$;
CREATE CONSTRAINT TRIGGER jobs_gate AFTER DELETE ON advisory_jobs DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW EXECUTE FUNCTION jobs_gate();`, gateClass)); err != nil {
		t.Fatal(err)
	}
	gates, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer gates.Close()
	gate := func(what string, id int64) {
		t.Helper()
		if _, err := gates.ExecContext(ctx, "SELECT pg_advisory_"+what+"($1, $2)", gateClass, id); err != nil {
			t.Fatal(err)
		}
	}
	jobs, err := a.Claim(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(jobs); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("claimed %v, want rows 1, 2, 3", got)
	}
	for _, j := range jobs {
		gate("lock", j.ID)
	}
	defer gates.ExecContext(ctx, "SELECT pg_advisory_unlock_all()")
	acked := make(chan error, len(jobs))
	ack := func(j *claim.Job) { go func() { acked <- j.Ack(ctx) }() }

	// Row 1's ack blocks at its commit; 2 and 3 queue behind it.
	ack(jobs[0])
	waitFor(t, "row 1's delete to wait at its commit", func() bool { return waiting(t, db, 1) })
	ack(jobs[1])
	ack(jobs[2])
	p := jobs[0].Settler.(*held).p
	waitFor(t, "rows 2 and 3 to queue", func() bool {
		return p.commit.Queued() == 2
	})
	held := func(ids ...int64) {
		t.Helper()
		for _, id := range ids {
			if !lockedElsewhere(t, db, a.class, id) {
				t.Errorf("row %d could be locked by another session before its delete committed", id)
			}
		}
		taken, err := b.Claim(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range taken {
			if slices.Contains(ids, j.ID) {
				t.Errorf("another claimer took row %d while its delete was uncommitted", j.ID)
			}
			if err := j.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	held(1, 2, 3)

	// Row 1 commits; rows 2 and 3 go in one turn, which blocks on row 2.
	gate("unlock", 1)
	if err := <-acked; err != nil {
		t.Fatalf("ack of row 1: %v", err)
	}
	waitFor(t, "the delete of rows 2 and 3 to wait at its commit", func() bool { return waiting(t, db, 2) })
	held(2, 3)

	gate("unlock", 2)
	gate("unlock", 3)
	for range 2 {
		if err := <-acked; err != nil {
			t.Fatalf("ack of rows 2 and 3: %v", err)
		}
	}
	var left []int64
	rows, err := db.Query("SELECT id FROM advisory_jobs ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		left = append(left, id)
	}
	if !slices.Equal(left, []int64{4}) {
		t.Errorf("rows left %v, want 4 alone", left)
	}
	if n := locks(t, db); n != 0 {
		t.Errorf("%d advisory locks of the class left after the acks", n)
	}
	if a.Held() != 0 {
		t.Errorf("Held = %d after the last ack, want 0", a.Held())
	}
}

// waiting tells whether some session waits for the commit gate of row id.
func waiting(t *testing.T, db *sql.DB, id int64) bool {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
		AND classid = $1::int::oid AND objid = $2::bigint::oid`, gateClass, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// lockedElsewhere tries the row's lock from a session of its own, and lets
// it go again if it got it.
func lockedElsewhere(t *testing.T, db *sql.DB, class int32, id int64) bool {
	t.Helper()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var got bool
	if err := conn.QueryRowContext(context.Background(), "SELECT pg_try_advisory_lock($1, $2::int)", class, id).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got {
		if _, err := conn.ExecContext(context.Background(), "SELECT pg_advisory_unlock($1, $2::int)", class, id); err != nil {
			t.Fatal(err)
		}
	}
	return !got
}

// waitFor polls cond until it holds, for at most a generous deadline: the
// states it waits on are in the database, which raises no signal.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
