package main

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// A row waiting for its parent (inbox.After) is counted in the WAITING
// column of queues and stats, and as "waiting" in their --json.
func TestQueuesCountWaiting(t *testing.T) {
	eachDB(t, func(t *testing.T, url string) {
		_, _, _, db := service(t, url)
		ctx := context.Background()
		if err := migrations.ApplyDependencies(ctx, db, "jobs", "id"); err != nil {
			t.Fatal(err)
		}
		b, err := inbox.Open(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		q := inbox.MustQueue[job]("jobs")
		// A parent a day away, so the child waits while the commands read.
		parent, err := inbox.Publish(ctx, b, q, job{}, inbox.Delay(24*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inbox.Publish(ctx, b, q, job{}, inbox.After(parent)); err != nil {
			t.Fatal(err)
		}
		header := regexp.MustCompile(`(?m)^TABLE +GROUP +AVAILABLE +HELD +DELAYED +WAITING +PARKED +OLDEST`)
		row := regexp.MustCompile(`(?m)^jobs +- +0 +0 +1 +1 +0 +-( |$)`)
		for _, cmd := range []string{"queues", "stats"} {
			out := inboxCmd(t, cmd, "--db", url, "--table", "jobs")
			if !header.MatchString(out) || !row.MatchString(out) {
				t.Errorf("%s printed:\n%s", cmd, out)
			}
		}
		var qs []queueJSON
		if err := json.Unmarshal([]byte(inboxCmd(t, "queues", "--db", url, "--json")), &qs); err != nil {
			t.Fatal(err)
		}
		if len(qs) != 1 || qs[0].Waiting != 1 || qs[0].Delayed != 1 {
			t.Errorf("queues --json = %+v, want 1 waiting and 1 delayed", qs)
		}
		var st statsJSON
		if err := json.Unmarshal([]byte(inboxCmd(t, "stats", "--db", url, "--table", "jobs", "--json")), &st); err != nil {
			t.Fatal(err)
		}
		if st.Waiting != 1 || st.Delayed != 1 {
			t.Errorf("stats --json = %+v, want 1 waiting and 1 delayed", st)
		}
	})
}
