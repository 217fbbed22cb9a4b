package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// A table whose service subscribes per group (never to the whole table):
// rows, stats and unpark of a mistyped group read its columns from any of
// its registered subscriptions, and a pause of the whole table shows its
// groups paused, with no row of its own.
func TestGroupSubscribedTable(t *testing.T) {
	everyDB(t, func(t *testing.T, url string) {
		db := renderService(t, url)
		id := insertRow(t, db, url, "render_requests", "request_id", "render", `{"page": 1}`, "render: font missing", true)

		out, errOut, err := runInbox("rows", "--db", url, "--table", "render_requests")
		if err != nil || errOut != "" {
			t.Fatalf("rows of render_requests: %v, warned %q", err, errOut)
		}
		if !strings.Contains(out, strconv.FormatInt(id, 10)) || !strings.Contains(out, "parked") {
			t.Fatalf("rows of render_requests printed:\n%s", out)
		}
		var st map[string]any
		if err := json.Unmarshal([]byte(inboxCmd(t, "stats", "--db", url, "--table", "render_requests", "--json")), &st); err != nil {
			t.Fatal(err)
		}
		if st["parked"] != 1.0 || st["available"] != 0.0 {
			t.Fatalf("stats = %v, want one parked row", st)
		}

		out, errOut, err = runInbox("unpark", "--db", url, "--table", "render_requests", "--group", "rendr", "--all")
		if err != nil {
			t.Fatalf("unpark --group rendr: %v", err)
		}
		if !strings.Contains(out, "unparked 0 rows of render_requests/rendr") {
			t.Fatalf("unpark --group rendr printed %q", out)
		}
		if !strings.Contains(errOut, "no registered subscription reads render_requests/rendr") || !strings.Contains(errOut, "render, thumb") {
			t.Fatalf("unpark --group rendr warned %q", errOut)
		}
	})
}

// A pause of a table whose service subscribes per group shows the groups
// paused by the table, and no row for the table whose columns nobody names.
func TestTablePauseShowsGroupsPaused(t *testing.T) {
	everyDB(t, func(t *testing.T, url string) {
		renderService(t, url)
		inboxCmd(t, "pause", "--db", url, "--table", "render_requests")
		var qs []map[string]any
		if err := json.Unmarshal([]byte(inboxCmd(t, "queues", "--db", url, "--json")), &qs); err != nil {
			t.Fatal(err)
		}
		if len(qs) != 2 {
			t.Fatalf("queues after a pause of the whole table = %v, want its two groups only", qs)
		}
		for _, q := range qs {
			if q["group"] == "" || q["paused"] != true || q["table_paused"] != true || q["error"] != nil || q["instances"] != 1.0 {
				t.Fatalf("queues after a pause of the whole table: %v", q)
			}
		}
		var one []map[string]any
		if err := json.Unmarshal([]byte(inboxCmd(t, "queues", "--db", url, "--table", "render_requests", "--group", "thumb", "--json")), &one); err != nil {
			t.Fatal(err)
		}
		if len(one) != 1 || one[0]["group"] != "thumb" || one[0]["paused"] != true || one[0]["instances"] != 1.0 {
			t.Fatalf("queues --table render_requests --group thumb = %v, want the group paused, with its instance", one)
		}
		out := inboxCmd(t, "queues", "--db", url)
		noDDL(t, "queues", out)
		if strings.Count(out, "yes (table)") != 2 {
			t.Fatalf("queues does not show both groups paused by the table:\n%s", out)
		}
		inboxCmd(t, "resume", "--db", url, "--table", "render_requests")
	})
}

// A table nobody registered: its columns are read from the catalog (its
// id from its primary key), and where the reference names do not fit the
// command names the flags to pass; it never prints DDL for it.
func TestUnregisteredTable(t *testing.T) {
	everyDB(t, func(t *testing.T, url string) {
		db := inboxtest.Open(t, url)
		renderTable(t, db, "keyed", "id", "job_id")
		id := insertRow(t, db, url, "keyed", "job_id", "", "keyed payload", "boom", true)
		out := inboxCmd(t, "rows", "--db", url, "--table", "keyed")
		if !strings.Contains(out, strconv.FormatInt(id, 10)) || !strings.Contains(out, "keyed payload") {
			t.Fatalf("rows of an unregistered table keyed by job_id printed:\n%s", out)
		}

		renderTable(t, db, "odd", "id", "job_ref", "locked_until", "due_at", "payload", "body")
		msg := inboxFails(t, "rows", "--db", url, "--table", "odd")
		noDDL(t, "rows of a table with other column names", msg)
		for _, want := range []string{"no registered subscription to odd", "--locked-until-column", "--payload-column", "due_at", "body"} {
			if !strings.Contains(msg, want) {
				t.Fatalf("rows of odd: %q does not say %q", msg, want)
			}
		}
		if strings.Contains(msg, "--id-column") {
			t.Fatalf("rows of odd asks for --id-column though its primary key names it: %s", msg)
		}
		inboxCmd(t, "rows", "--db", url, "--table", "odd", "--locked-until-column", "due_at", "--payload-column", "body")

		msg = inboxFails(t, "rows", "--db", url, "--table", "odd", "--locked-until-column", "due_att", "--payload-column", "body")
		noDDL(t, "rows with a mistyped column", msg)
		if !strings.Contains(msg, `no column "due_att"`) || !strings.Contains(msg, "--locked-until-column") {
			t.Fatalf("rows with a mistyped column: %s", msg)
		}
		msg = inboxFails(t, "stats", "--db", url, "--table", "odd_jobs")
		noDDL(t, "stats of a missing table", msg)
		if !strings.Contains(msg, "table odd_jobs does not exist") {
			t.Fatalf("stats of a missing table: %s", msg)
		}
	})
}

// pause refuses a table that does not exist, and warns when no
// registered subscription reads the one it pauses.
func TestPauseChecksTheTable(t *testing.T) {
	everyDB(t, func(t *testing.T, url string) {
		db := renderService(t, url)
		msg := inboxFails(t, "pause", "--db", url, "--table", "render_reqeusts")
		if !strings.Contains(msg, "table render_reqeusts does not exist") {
			t.Fatalf("pause of a mistyped table: %s", msg)
		}
		var paused []map[string]any
		if err := json.Unmarshal([]byte(inboxCmd(t, "queues", "--db", url, "--json")), &paused); err != nil {
			t.Fatal(err)
		}
		for _, q := range paused {
			if q["paused"] != false {
				t.Fatalf("a refused pause paused %v", q)
			}
		}
		renderTable(t, db, "unread_jobs")
		out, errOut, err := runInbox("pause", "--db", url, "--table", "unread_jobs")
		if err != nil || !strings.Contains(out, "paused unread_jobs") {
			t.Fatalf("pause of an unread table: %v %q", err, out)
		}
		if !strings.Contains(errOut, "warning: no registered subscription reads unread_jobs") {
			t.Fatalf("pause of an unread table warned %q", errOut)
		}
		_, errOut, err = runInbox("pause", "--db", url, "--table", "render_requests", "--group", "render")
		if err != nil || errOut != "" {
			t.Fatalf("pause of a subscribed group: %v, warned %q", err, errOut)
		}
		_, errOut, err = runInbox("resume", "--db", url, "--table", "render_requests", "--group", "thumb")
		if err != nil || !strings.Contains(errOut, "render_requests/thumb was not paused") {
			t.Fatalf("resume of a group not paused: %v, warned %q", err, errOut)
		}
	})
}
