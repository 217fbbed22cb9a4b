package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

var flagLine = regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z][a-z-]*)`)

// helpOf runs inbox args... --help and returns the flags it lists.
func helpOf(t *testing.T, args ...string) (string, []string) {
	t.Helper()
	out := inboxCmd(t, append(args, "--help")...)
	name := "inbox " + strings.Join(args, " ")
	if !strings.Contains(out, "Usage:\n  "+name) || !strings.Contains(out, "Flags:\n") || strings.Contains(out, "Usage of") {
		t.Fatalf("%s --help is not in the command line's one style:\n%s", name, out)
	}
	var flags []string
	for _, m := range flagLine.FindAllStringSubmatch(out, -1) {
		flags = append(flags, m[1])
	}
	slices.Sort(flags)
	return out, flags
}

// Every command's help has the same style and lists only its flags.
func TestHelp(t *testing.T) {
	for _, c := range newRoot().Commands() {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" || c.Name() == "bench" {
			continue
		}
		paths := [][]string{{c.Name()}}
		if c.HasSubCommands() { // a group (schedule): its commands take --db
			paths = nil
			for _, sub := range c.Commands() {
				paths = append(paths, []string{c.Name(), sub.Name()})
			}
		}
		for _, p := range paths {
			_, flags := helpOf(t, p...)
			if !slices.Contains(flags, "db") || !slices.Contains(flags, "help") {
				t.Errorf("inbox %s --help lists %v, without --db", strings.Join(p, " "), flags)
			}
		}
	}
	want := map[string][]string{
		"pause":   {"db", "group", "help", "json", "table"},
		"resume":  {"db", "group", "help", "json", "table"},
		"stats":   {"attempts-column", "created-at-column", "db", "group", "group-column", "help", "id-column", "json", "last-error-column", "lease", "locked-until-column", "payload-column", "table"},
		"migrate": {"db", "help", "json", "table", "trigger"},
		"queues":  {"db", "group", "help", "json", "table"},
		"limits":  {"db", "help", "json"},
	}
	for name, flags := range want {
		if _, got := helpOf(t, name); !slices.Equal(got, flags) {
			t.Errorf("inbox %s --help lists %v, want %v", name, got, flags)
		}
	}
	out, flags := helpOf(t, "bench", "throughput")
	if !slices.Contains(flags, "jobs") || !slices.Contains(flags, "db") || !strings.Contains(out, "measure:") {
		t.Errorf("inbox bench throughput --help:\n%s", out)
	}
	if out := inboxCmd(t, "bench", "--help"); !strings.Contains(out, "Usage:\n  inbox bench throughput|latency") {
		t.Errorf("inbox bench --help:\n%s", out)
	}
}
