package dialect_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// On SQLite one writer holds the turn; another waits for it, or gives up
// when its context ends. On Postgres there is no turn to wait for.
func TestWriterTurns(t *testing.T) {
	w := dialect.NewWriter(dialect.Of(dialect.SQLite))
	ctx := context.Background()
	if err := w.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := w.Lock(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second Lock while the turn is held returned %v, want the context's deadline", err)
	}
	got := make(chan error, 1)
	go func() { got <- w.Lock(ctx) }()
	w.Unlock()
	if err := <-got; err != nil {
		t.Fatalf("Lock after the turn ended: %v", err)
	}
	w.Unlock()

	pg := dialect.NewWriter(dialect.Of(dialect.Postgres))
	for range 2 {
		if err := pg.Lock(short); err != nil {
			t.Fatalf("Postgres writer: %v", err)
		}
	}
}
