package inbox_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// A queue of one group on a struct with no group column is refused by
// Publish and PublishTx as by Subscribe, and writes nothing.
func TestGroupWithoutGroupColumnRefusedAtPublish(t *testing.T) {
	ctx := context.Background()
	b := open(t, inboxtest.SQLite(t))
	q := inbox.MustQueue[Job4]("jobs").Group("x")
	if _, err := inbox.Publish(ctx, b, q, Job4{Payload: []byte("p")}); err == nil || !strings.Contains(err.Error(), `inbox:"group"`) {
		t.Errorf("Publish to group x of a struct with no group column: %v", err)
	}
	tx, err := b.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := inbox.PublishTx(ctx, b, tx, q, Job4{Payload: []byte("p")}); err == nil || !strings.Contains(err.Error(), `inbox:"group"`) {
		t.Errorf("PublishTx to group x of a struct with no group column: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := rows(t, b.DB()); n != 0 {
		t.Errorf("%d rows written", n)
	}
}

// A field with an inbox tag and no db tag is named as missing its db tag,
// not reported as absent.
func TestInboxTagWithoutDBTag(t *testing.T) {
	type untagged struct {
		ID          int64      `inbox:"id,generated"`
		LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
		Payload     []byte     `db:"payload" inbox:"payload"`
	}
	_, err := inbox.NewQueue[untagged]("jobs")
	if err == nil || !strings.Contains(err.Error(), "ID") || !strings.Contains(err.Error(), "db tag") || strings.Contains(err.Error(), "has no field tagged") {
		t.Fatalf("a field tagged inbox:\"id\" with no db tag: %v", err)
	}
}

// A field a claim cannot scan a column into (a struct, a map) is refused by
// NewQueue, not at every row's scan; types that scan themselves pass.
func TestUnscannableFieldRefusedByNewQueue(t *testing.T) {
	type doc struct{ Title string }
	type structPayload struct {
		ID          int64      `db:"id" inbox:"id,generated"`
		LockedUntil *time.Time `db:"locked_until" inbox:"locked_until"`
		Payload     doc        `db:"payload" inbox:"payload"`
	}
	_, err := inbox.NewQueue[structPayload]("jobs")
	if err == nil || !strings.Contains(err.Error(), "Payload") || !strings.Contains(err.Error(), "sql.Scanner") {
		t.Fatalf("a struct payload: %v", err)
	}
	type mapColumn struct {
		Job4
		Meta map[string]string `db:"meta"`
	}
	if _, err := inbox.NewQueue[mapColumn]("jobs"); err == nil || !strings.Contains(err.Error(), "Meta") {
		t.Fatalf("a map column: %v", err)
	}
	type scanners struct {
		ID          int64          `db:"id" inbox:"id,generated"`
		LockedUntil sql.NullTime   `db:"locked_until" inbox:"locked_until"`
		Payload     string         `db:"payload" inbox:"payload"`
		LastError   sql.NullString `db:"last_error" inbox:"last_error"`
		CreatedAt   time.Time      `db:"created_at" inbox:"created_at"`
		Note        *string        `db:"note"`
	}
	if _, err := inbox.NewQueue[scanners]("jobs"); err != nil {
		t.Fatalf("fields that scan: %v", err)
	}
}

// A SQLite file in a directory that does not exist is refused at Open with
// the path and what to do, not "unable to open database file (14)" at the
// first statement.
func TestMissingSQLiteDirectoryNamed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-such-dir", "jobs.db")
	b, err := inbox.Open("sqlite://" + path)
	if err == nil {
		b.Close()
		t.Fatal("a SQLite file in a missing directory was opened")
	}
	if !strings.Contains(err.Error(), filepath.Dir(path)) {
		t.Fatalf("the error does not name the directory: %v", err)
	}
}
