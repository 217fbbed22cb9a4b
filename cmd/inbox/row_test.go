package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// rows cuts the last error and the payload unless --wide; row --id shows
// one row whole.
func TestWideAndRow(t *testing.T) {
	everyDB(t, func(t *testing.T, url string) {
		db := inboxtest.Open(t, url)
		renderTable(t, db, "wide_jobs")
		lastErr := "render: template \"dunning\" not found in /srv/templates/invoices: check the deploy of release 2026.12.04"
		payload := `{"invoice": 13, "customer": "Ada Lovelace", "lines": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}]}`
		id := strconv.FormatInt(insertRow(t, db, url, "wide_jobs", "id", "", payload, lastErr, true), 10)
		args := []string{"--db", url, "--table", "wide_jobs"}

		out := inboxCmd(t, append([]string{"rows"}, args...)...)
		if strings.Contains(out, lastErr) || !strings.Contains(out, "…") {
			t.Fatalf("rows without --wide does not cut the last error:\n%s", out)
		}
		out = inboxCmd(t, append([]string{"rows", "--wide"}, args...)...)
		if !strings.Contains(out, lastErr) || !strings.Contains(out, payload) {
			t.Fatalf("rows --wide cuts the last error or the payload:\n%s", out)
		}
		out = inboxCmd(t, append([]string{"row", "--id", id}, args...)...)
		for _, want := range []string{"id:", id, "state:", "parked", "attempts:", "3", "due:", "last error:", lastErr, "payload:", payload} {
			if !strings.Contains(out, want) {
				t.Fatalf("row --id %s does not show %q:\n%s", id, want, out)
			}
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(inboxCmd(t, append([]string{"row", "--id", id, "--json"}, args...)...)), &r); err != nil {
			t.Fatal(err)
		}
		if r["last_error"] != lastErr || r["payload"] != payload || r["state"] != "parked" || r["attempts"] != 3.0 {
			t.Fatalf("row --json = %v", r)
		}
		if msg := inboxFails(t, append([]string{"row", "--id", "999999"}, args...)...); !strings.Contains(msg, "wide_jobs has no row 999999") {
			t.Fatalf("row of a missing id: %s", msg)
		}
	})
}
