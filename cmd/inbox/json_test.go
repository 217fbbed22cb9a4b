package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Every command's --json has one schema: snake_case keys, durations in
// keys that end in _seconds, times as RFC 3339 strings in keys that end in
// _at (and locked_until); docs/operating.md names every key.
func TestJSONSchema(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	everyDB(t, func(t *testing.T, url string) {
		db := renderService(t, url)
		id := strconv.FormatInt(insertRow(t, db, url, "render_requests", "request_id", "render", `{"page": 1}`, "render: font missing", true), 10)
		q := []string{"--table", "render_requests"}
		for _, args := range [][]string{
			{"queues"},
			{"queues", "--table", "render_requests", "--group", "render"},
			{"instances"},
			append([]string{"rows"}, q...),
			append([]string{"row", "--id", id}, q...),
			append([]string{"stats"}, q...),
			append([]string{"run-now", "--all"}, q...),
			append([]string{"delete", "--id", "999999"}, q...),
			append([]string{"unpark", "--id", id}, q...),
			append([]string{"cancel", "--id", "999999"}, q...),
			{"pause", "--table", "render_requests", "--group", "render"},
			{"resume", "--table", "render_requests", "--group", "render"},
			{"migrate-registry"},
			{"migrate", "--table", "more_jobs"},
		} {
			out := inboxCmd(t, append(args, "--db", url, "--json")...)
			var v any
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatalf("inbox %s --json printed no JSON: %v\n%s", args[0], err, out)
			}
			checkSchema(t, args[0], "", v, string(doc))
		}

		var insts []map[string]any
		if err := json.Unmarshal([]byte(inboxCmd(t, "instances", "--db", url, "--json")), &insts); err != nil {
			t.Fatal(err)
		}
		if len(insts) != 1 || insts[0]["heartbeat_interval_seconds"] != 0.05 {
			t.Fatalf("instances: %v, want one with heartbeat_interval_seconds 0.05", insts)
		}
		subs, _ := insts[0]["subscriptions"].([]any)
		if len(subs) != 2 || subs[0].(map[string]any)["lease_seconds"] != 30.0 || subs[0].(map[string]any)["columns"].(map[string]any)["id"] != "request_id" {
			t.Fatalf("instances' subscriptions: %v, want two with lease_seconds 30 and the id column request_id", subs)
		}
	})
}

var snake = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// checkSchema checks v, printed by command cmd under key, and its members.
func checkSchema(t *testing.T, cmd, key string, v any, doc string) {
	t.Helper()
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			checkSchema(t, cmd, key, e, doc)
		}
	case map[string]any:
		for k, e := range v {
			if key == "columns" { // keyed by role, valued by column
				continue
			}
			if !snake.MatchString(k) {
				t.Errorf("inbox %s --json: key %q is not snake_case", cmd, k)
			}
			if !strings.Contains(doc, "`"+k+"`") {
				t.Errorf("inbox %s --json: key %q is not in docs/operating.md", cmd, k)
			}
			checkSchema(t, cmd, k, e, doc)
		}
	case string:
		if strings.HasSuffix(key, "_at") || key == "locked_until" {
			if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
				t.Errorf("inbox %s --json: %s %q is not RFC 3339: %v", cmd, key, v, err)
			}
		}
	case float64:
		if strings.HasSuffix(key, "_at") || key == "locked_until" {
			t.Errorf("inbox %s --json: %s is the number %v, not an RFC 3339 time", cmd, key, v)
		}
		if v > 1e9 && !strings.HasSuffix(key, "id") {
			t.Errorf("inbox %s --json: %s is %v: a duration in nanoseconds?", cmd, key, v)
		}
	}
}
