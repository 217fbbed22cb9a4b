package inbox

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// While a subscription runs on a SQLite file, the broker checkpoints the
// log in the background. With SQLite's own checkpoint at the mark turned
// off, nothing else checkpoints it: the log would grow by a batch's writes
// (its publish, claims and acks) with each batch; checkpointed between
// batches, each batch writes it again from its start, and it stays the
// size of about one batch.
func TestCheckpointsWhileSubscriptionsRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ckpt.db")
	// A short poll: its claims are the writes that let a round after the
	// last batch's acks run.
	b, err := Open("sqlite://"+path+"?_pragma=wal_autocheckpoint(0)", PollInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if _, err := b.DB().Exec("CREATE TABLE jobs (id INTEGER PRIMARY KEY, locked_until TEXT, payload BLOB, attempts INTEGER NOT NULL DEFAULT 0)"); err != nil {
		t.Fatal(err)
	}
	q := MustQueue[row]("jobs")
	rows := make([]row, 500)
	for i := range rows {
		rows[i].Payload = make([]byte, 200)
	}
	const batches = 12
	walSize := func() int64 {
		st, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	var first int64
	handled := make(chan struct{}, len(rows))
	sub, err := Subscribe(b, q, func(context.Context, row) error { handled <- struct{}{}; return nil }, Workers(8))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- sub.Run(runCtx) }()
	defer func() { stop(); <-ran }()
	for i := range batches {
		if _, err := PublishMany(ctx, b, q, rows); err != nil {
			t.Fatal(err)
		}
		for range rows {
			select {
			case <-handled:
			case <-time.After(30 * time.Second):
				t.Fatalf("batch %d: not handled in 30 s", i)
			}
		}
		for deadline := time.Now().Add(30 * time.Second); ; {
			var n int
			if err := b.DB().QueryRow("SELECT count(*) FROM jobs").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("batch %d: %d rows left 30 s after their handling", i, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if i == 0 {
			first = walSize()
		}
		b.mu.Lock()
		running := b.checkpoints != nil
		b.mu.Unlock()
		if !running {
			t.Fatal("no background checkpoints while a subscription runs")
		}
		// The batch's acks have committed: of the next two rounds, the
		// second began after them.
		select {
		case <-b.checkpointRounds:
		default:
		}
		for range 2 {
			select {
			case <-b.checkpointRounds:
			case <-time.After(10 * time.Second):
				t.Fatal("no background checkpoint in 10 s while a subscription ran")
			}
		}
	}
	last := walSize()
	t.Logf("log after the first batch of %d rows: %d bytes; after %d batches: %d bytes", len(rows), first, batches, last)
	if last > 3*first {
		t.Fatalf("the log grew to %d bytes over %d batches, %d after the first: no background checkpoint let it start again", last, batches, first)
	}
}
