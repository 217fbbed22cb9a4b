package dashboard_test

import (
	"context"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/dashboard"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// The pages of a queue of ten million rows, timed: run by hand, since the
// fill takes minutes (SQLINBOX_BIG_TABLE=1 go test -run TestTenMillionRows
// -v ./dashboard); the figures are in BENCHMARKS.md.
func TestTenMillionRows(t *testing.T) {
	if os.Getenv("SQLINBOX_BIG_TABLE") == "" {
		t.Skip("set SQLINBOX_BIG_TABLE=1 to time the pages on a table of ten million rows (minutes to fill)")
	}
	ctx := context.Background()
	b, err := inbox.Open(inboxtest.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, err := range []error{migrations.Apply(ctx, b.DB(), "big_jobs"), migrations.ApplyRegistry(ctx, b.DB())} {
		if err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if _, err := b.DB().Exec(`INSERT INTO big_jobs (payload, locked_until, attempts, last_error)
		SELECT convert_to('{"invoice": ' || i || '}', 'UTF8'),
			CASE WHEN i % 1000 = 0 THEN now() + interval '1 hour' WHEN i % 100000 = 7 THEN '9999-12-31' END,
			CASE WHEN i % 100000 = 7 THEN 25 ELSE 0 END,
			CASE WHEN i % 100000 = 7 THEN 'renderer: timeout' END
		FROM generate_series(1, 10000000) AS i`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.DB().Exec("VACUUM ANALYZE big_jobs"); err != nil {
		t.Fatal(err)
	}
	t.Logf("filled 10M rows in %v", time.Since(start))
	op := inbox.NewOperator(b)
	if err := op.Pause(ctx, "big_jobs", ""); err != nil { // a paused queue is shown, with no service to drain it
		t.Fatal(err)
	}
	h, err := dashboard.New(b)
	if err != nil {
		t.Fatal(err)
	}
	searched := regexp.MustCompile(`, searched ids through \d+`)
	c := client(t)
	srv := newServer(t, h)
	for _, page := range []string{"", "queue?table=big_jobs", "queue?table=big_jobs&state=parked", "queue?table=big_jobs&state=delayed",
		"queue?table=big_jobs&after=9000000", "queue?table=big_jobs&id=5000000"} {
		for range 2 { // the second read is the one with a warm cache
			start := time.Now()
			code, body := get(t, c, srv+page)
			took := time.Since(start)
			if code != http.StatusOK {
				t.Fatalf("%s: %d\n%s", page, code, body)
			}
			t.Logf("%-45s %v  %d rows%s", "/"+page, took, strings.Count(body, "<tr data-id="), searched.FindString(body))
			if took > 10*time.Second {
				t.Errorf("/%s took %v on 10M rows", page, took)
			}
		}
	}
}
