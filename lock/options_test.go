package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlinbox/sqlinbox/internal/config"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/lock"
	"github.com/sqlinbox/sqlinbox/notify"
)

// refused checks that err wraps the module's ErrInvalid and names the option
// with its bad value and the bound.
func refused(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if !errors.Is(err, lock.ErrInvalid) || !errors.Is(err, config.ErrInvalid) {
		t.Errorf("%s: %v, want an error wrapping ErrInvalid", what, err)
		return
	}
	t.Log(err)
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %q does not say %q", what, err, w)
		}
	}
}

// Every option refuses a value out of its bound at construction, and
// nothing is created: no locker, no store, no place taken.
func TestOptionsRefused(t *testing.T) {
	ctx := context.Background()
	store := lock.NewMemory(nil)

	t.Run("New", func(t *testing.T) {
		for _, tc := range []struct {
			what  string
			store lock.Store
			opt   lock.Option
			want  []string
		}{
			{"nil store", nil, nil, []string{"store is nil"}},
			{"Namespace too long", store, lock.Namespace(strings.Repeat("n", lock.MaxName+1)), []string{"Namespace(", "256 bytes", "at most 255"}},
			{"Namespace with NUL", store, lock.Namespace("a\x00b"), []string{"Namespace", "NUL byte"}},
			{"Namespace not UTF-8", store, lock.Namespace("\xff"), []string{"Namespace", "not valid UTF-8"}},
			{"WithClock(nil)", store, lock.WithClock(nil), []string{"WithClock(nil)"}},
		} {
			l, err := lock.New(tc.store, tc.opt)
			refused(t, tc.what, err, tc.want...)
			if l != nil {
				t.Errorf("%s: a locker was made", tc.what)
			}
		}
	})

	t.Run("Take", func(t *testing.T) {
		l, err := lock.New(store, lock.Namespace("refused"))
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			opt  lock.TakeOption
			want []string
		}{
			{lock.TTL(0), []string{"TTL(0s)", "at least 1ms"}},
			{lock.TTL(-time.Second), []string{"TTL(-1s)", "at least 1ms"}},
			{lock.TTL(time.Microsecond), []string{"TTL(1µs)", "at least 1ms"}},
			{lock.Wait(-time.Second), []string{"Wait(-1s)", "positive"}},
			{lock.Tries(-1), []string{"Tries(-1)", "positive"}},
			{lock.RetryDelay(0), []string{"RetryDelay(0s)", "at least 1ms"}},
			{lock.RetryDelay(-time.Second), []string{"RetryDelay(-1s)", "at least 1ms"}},
			{lock.MaxHolders(0), []string{"MaxHolders(0)", "1 to 10000"}},
			{lock.MaxHolders(-1), []string{"MaxHolders(-1)", "1 to 10000"}},
			{lock.MaxHolders(lock.HoldersLimit + 1), []string{"MaxHolders(10001)", "1 to 10000"}},
		} {
			h, ok, err := l.Take(ctx, "k", lock.Wait(time.Hour), tc.opt)
			refused(t, tc.want[0], err, append(tc.want, `"refused/k"`)...)
			if ok || h.Token != "" {
				t.Errorf("%s: a place was taken: %+v", tc.want[0], h)
			}
		}
		if n, err := lock.Leftover(ctx, store); err != nil || n != 0 {
			t.Errorf("the store keeps %d places after refused takes (err %v), want 0", n, err)
		}
	})

	t.Run("NewSQL", func(t *testing.T) {
		// No lock table: an option checked after the database was asked
		// would fail naming migrations.ApplyLocks instead.
		db, _, err := dialect.Open("sqlite://:memory:")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		hub := notify.NewHub()
		for _, tc := range []struct {
			opt  lock.SQLOption
			want []string
		}{
			{lock.SQLClock(nil), []string{"SQLClock(nil)"}},
			{lock.SQLListener(nil, nil), []string{"SQLListener with a nil"}},
			{lock.SQLListener(nil, hub), []string{"SQLListener with a nil"}},
			{lock.SQLListener(notify.NewListener(db, hub, nil), nil), []string{"SQLListener with a nil"}},
			{lock.SQLLogger(nil), []string{"SQLLogger(nil)"}},
			{lock.SweepEvery(-time.Second), []string{"SweepEvery(-1s)", "at least 1ms"}},
			{lock.SweepEvery(time.Microsecond), []string{"SweepEvery(1µs)", "at least 1ms"}},
		} {
			s, err := lock.NewSQL(ctx, db, tc.opt)
			refused(t, tc.want[0], err, tc.want...)
			if s != nil || strings.Contains(err.Error(), "ApplyLocks") {
				t.Errorf("%s: the store was made or the database asked: %v", tc.want[0], err)
			}
		}
	})

	t.Run("NewRedis", func(t *testing.T) {
		// A client of no server: an option checked after Redis was asked
		// would fail with a connection error instead.
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
		defer c.Close()
		for _, tc := range []struct {
			client redis.UniversalClient
			opt    lock.RedisOption
			want   []string
		}{
			{nil, nil, []string{"client is nil"}},
			{c, lock.RedisPrefix(""), []string{`RedisPrefix("")`}},
			{c, lock.RedisLogger(nil), []string{"RedisLogger(nil)"}},
		} {
			s, err := lock.NewRedis(ctx, tc.client, tc.opt)
			refused(t, tc.want[0], err, tc.want...)
			if s != nil {
				t.Errorf("%s: the store was made", tc.want[0])
			}
		}
	})
}
