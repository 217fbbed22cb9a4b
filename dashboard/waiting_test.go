package dashboard_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// A row waiting for its parent (inbox.After) is counted as waiting on the
// overview and the queue page, and the queue's waiting tab lists it.
func TestPagesShowWaitingRows(t *testing.T) {
	eachDB(t, func(t *testing.T, dbURL string) {
		s := newSite(t, dbURL)
		ctx := context.Background()
		if err := migrations.ApplyDependencies(ctx, s.b.DB(), "jobs", "id"); err != nil {
			t.Fatal(err)
		}
		// A parent a day away, so the child waits while the pages are read.
		parent, err := inbox.Publish(ctx, s.b, jobs, Job{Payload: []byte("parent")}, inbox.Delay(24*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		child, err := inbox.Publish(ctx, s.b, jobs, Job{Payload: []byte("child")}, inbox.After(parent))
		if err != nil {
			t.Fatal(err)
		}
		c := client(t)
		_, body := get(t, c, s.url(""))
		contains(t, body, `<th class="num">Waiting</th>`)
		contains(t, body, "<td class=\"num\">1</td>\n  <td class=\"num\">1</td>") // delayed 1, waiting 1

		code, body := get(t, c, s.url("queue?table=jobs&state=waiting"))
		if code != http.StatusOK {
			t.Fatalf("queue page: %d\n%s", code, body)
		}
		contains(t, body, `<b id="waiting-count">1</b>`)
		contains(t, body, `<option value="waiting" selected>waiting</option>`)
		contains(t, body, `data-id="`+itoa(child)+`"`)
		if strings.Contains(body, `data-id="`+itoa(parent)+`"`) {
			t.Error("the waiting tab lists the delayed parent")
		}
		contains(t, body, `<span class="pill waiting">waiting</span>`)

		_, body = get(t, c, s.url("row?table=jobs&id="+itoa(child)))
		contains(t, body, "after its parents (waiting)")
	})
}
