package lock

import (
	"context"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// HeldTokens counts the holds a locker remembers for ReleaseName.
func HeldTokens(l *Locker) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, set := range l.held {
		n += len(set)
	}
	return max(n, l.ends.len())
}

// Leftover counts what a store keeps: a Memory's places, a SQL store's rows,
// a Redis store's lock keys.
func Leftover(ctx context.Context, s Store) (int, error) {
	switch s := s.(type) {
	case *Memory:
		s.mu.Lock()
		defer s.mu.Unlock()
		n := 0
		for _, slots := range s.locks {
			n += max(len(slots), 1)
		}
		return max(n, s.ends.len()), nil
	case *SQL:
		var n int
		err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+dialect.LockTable).Scan(&n)
		return n, err
	case *Redis:
		keys, err := s.client.Keys(ctx, s.prefix+"lock:*").Result()
		return len(keys), err
	}
	return 0, nil
}
