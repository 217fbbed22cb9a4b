package schedule_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sqlinbox/sqlinbox/migrations"
	"github.com/sqlinbox/sqlinbox/schedule"
)

// hostile is a handler error an operator's page must show as text: markup,
// a character of several bytes cut at the bound, and more than the bound.
var hostile = `<script>alert(1)</script> "><img src=x onerror=alert(2)> ` + strings.Repeat("é", 1000)

// waitFor polls Inspect until ok holds, or fails after wait.
func waitFor(t *testing.T, db *sql.DB, what string, ok func(schedule.Status) bool) schedule.Status {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		st, err := schedule.Inspect(context.Background(), db, 50)
		if err != nil {
			t.Fatal(err)
		}
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen within %v: %+v", what, wait, st)
		}
		time.Sleep(10 * time.Millisecond) // polls the tables, which send no signal
	}
}

// A run that returns an error counts a failure: its share keeps the error,
// cut to MaxErrorText bytes, and the instance's heartbeat tells its count,
// its last error and its next moment; Inspect computes the schedule's next
// moments from the spec the heartbeats keep.
func TestInspectTellsNextMomentsAndFailures(t *testing.T) {
	eachDatabase(t, func(t *testing.T, open opener) {
		c := newCluster(t, open)
		failing := func(ctx context.Context, r schedule.Run) error {
			c.runs <- r
			if r.InstanceName == "b" {
				return errors.New(hostile)
			}
			return nil
		}
		for _, name := range []string{"a", "b"} {
			c.start(name, 1, func(s *schedule.Scheduler) error {
				return s.Add("report", schedule.Every(interval), schedule.EveryInstance, failing)
			})
		}
		db := open(t)
		first := c.moment()
		c.collect(2)
		st := waitFor(t, db, "both shares of the first moment done", func(st schedule.Status) bool {
			return len(st.Moments) == 1 && st.Moments[0].Done == 2
		})
		m := st.Moments[0]
		if !m.FiredAt.Equal(first) || m.Failed != 1 || len(m.Shares) != 2 {
			t.Fatalf("moment %+v: want fired at %v, 2 shares, 1 failed", m, first)
		}
		for _, sh := range m.Shares {
			switch {
			case sh.Holder == "a" && sh.Error != "":
				t.Errorf("a's share has error %q; its run succeeded", sh.Error)
			case sh.Holder == "b" && (sh.Error == "" || !strings.HasPrefix(hostile, strings.TrimSuffix(sh.Error, "…"))):
				t.Errorf("b's share has error %q, want a prefix of the handler's", sh.Error)
			case sh.Holder == "b" && (len(sh.Error) > schedule.MaxErrorText || !utf8.ValidString(sh.Error) || !strings.HasSuffix(sh.Error, "…")):
				t.Errorf("b's share's error is %d bytes (bound %d), valid UTF-8 %v: %q", len(sh.Error), schedule.MaxErrorText, utf8.ValidString(sh.Error), sh.Error)
			}
		}
		// The heartbeat at two minutes tells the failure counted at one.
		c.moment()
		c.collect(2)
		c.armed()
		st = waitFor(t, db, "b's failure in its heartbeat", func(st schedule.Status) bool {
			return len(st.Schedules) == 1 && st.Schedules[0].Failures >= 1
		})
		sum := st.Schedules[0]
		if sum.Spec != "every 1m0s" || sum.Placement != "every-instance" || len(sum.Members) != 2 {
			t.Fatalf("summary %+v: want every 1m0s, every-instance, 2 members", sum)
		}
		if sum.LastErrorBy != "b" || sum.LastError == "" || !strings.HasPrefix(hostile, strings.TrimSuffix(sum.LastError, "…")) || len(sum.LastError) > schedule.MaxErrorText {
			t.Errorf("last error %q by %q, want b's, cut to %d bytes", sum.LastError, sum.LastErrorBy, schedule.MaxErrorText)
		}
		for _, h := range sum.Members {
			if want := c.clk.Now().Add(interval); !h.NextAt.Equal(want) {
				t.Errorf("%s's next moment %v, want %v", h.Instance, h.NextAt, want)
			}
			if h.Instance == "a" && (h.Failures != 0 || h.Runs < 1) || h.Instance == "b" && h.Failures != h.Runs {
				t.Errorf("%s: %d runs, %d failures", h.Instance, h.Runs, h.Failures)
			}
		}
		now := time.Now()
		if len(sum.Next) != 3 || !sum.Next[0].After(now) || sum.Next[0].Sub(now) > interval || sum.Next[1].Sub(sum.Next[0]) != interval {
			t.Errorf("next moments %v at %v: want the next three minutes", sum.Next, now)
		}
		c.stopAll()
	})
}

// Tables made by the version before: ApplySchedules adds the columns (twice
// over: it is idempotent), an old heartbeat reads with an empty spec, and a
// scheduler then records its failures in them.
func TestApplySchedulesUpgradesOldTables(t *testing.T) {
	for _, dbName := range []string{"sqlite", "postgres"} {
		t.Run(dbName, func(t *testing.T) {
			var url string
			if dbName == "sqlite" {
				url = "sqlite://:memory:upgrade_" + randomName()
			} else {
				url = postgresURL(t)
			}
			open := func(t *testing.T) *sql.DB { return openURL(t, url) }
			db := open(t) // keeps a memory database alive
			old, err := os.ReadFile("testdata/v1_" + dbName + ".sql")
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for _, stmt := range strings.Split(string(old), "\n-- ;\n") {
				if _, err := db.ExecContext(ctx, stmt); err != nil {
					t.Fatalf("old schema: %v\n%s", err, stmt)
				}
			}
			if _, err := db.ExecContext(ctx, `INSERT INTO sqlinbox_schedule_heartbeats (schedule, instance, runners, expires_at) VALUES ('old', 'x', 1, '2020-01-01 00:00:00.000')`); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if err := migrations.ApplySchedules(ctx, db); err != nil {
					t.Fatal(err)
				}
			}
			st, err := schedule.Inspect(ctx, db, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Heartbeats) != 1 || st.Heartbeats[0].Spec != "" || st.Heartbeats[0].Failures != 0 {
				t.Fatalf("old heartbeat read as %+v", st.Heartbeats)
			}
			c := newCluster(t, open)
			c.start("a", 1, func(s *schedule.Scheduler) error {
				return s.Add("fails", schedule.Every(interval), schedule.One, func(ctx context.Context, r schedule.Run) error {
					c.runs <- r
					return errors.New("upgraded and failing")
				})
			})
			c.moment()
			c.collect(1)
			waitFor(t, db, "the failure in the upgraded shares table", func(st schedule.Status) bool {
				return len(st.Moments) == 1 && st.Moments[0].Failed == 1 && st.Moments[0].Shares[0].Error == "upgraded and failing"
			})
			c.stopAll()
		})
	}
}

// A spec's String reads back as the same spec.
func TestParseSpec(t *testing.T) {
	for _, s := range []schedule.Spec{schedule.Every(90 * time.Second), schedule.Every(time.Millisecond),
		schedule.Cron("*/5 * * * *", ""), schedule.Cron("0 9 * * 1-5", "Europe/Paris"), schedule.Cron("@daily", "UTC")} {
		got, err := schedule.ParseSpec(s.String())
		if err != nil || got.String() != s.String() {
			t.Errorf("ParseSpec(%q) = %v, %v", s.String(), got, err)
		}
	}
	for _, bad := range []string{"", "unset", "every soon", "cron * * * * *"} {
		if _, err := schedule.ParseSpec(bad); err == nil {
			t.Errorf("ParseSpec(%q) accepted", bad)
		}
	}
}
