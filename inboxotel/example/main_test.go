package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The example's /metrics holds the run's handlings: 10 acked, and a retry
// for each id divisible by 7.
func TestMetricsEndpoint(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "m.db")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, url, "127.0.0.1:0", 10, out) }()
	var addr, text string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(out.Name())
		text = string(b)
		if m := regexp.MustCompile(`http://(\S+)/metrics`).FindStringSubmatch(text); m != nil {
			addr = m[1]
		}
		if addr != "" && strings.Contains(text, "serving metrics until interrupted") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if addr == "" || !strings.Contains(text, "rendered 10 invoices") {
		t.Fatalf("the example printed %q", text)
	}
	acked := regexp.MustCompile(`inbox_handlings_total\{[^}]*outcome="acked"[^}]*queue="metrics_invoices"[^}]*\} 10\b`)
	retried := regexp.MustCompile(`inbox_handlings_total\{[^}]*outcome="retried"[^}]*\} 1\b`)
	// The run ends at the tenth ack; the retry of id 7 is reported by the
	// goroutine that settled it, which a loaded machine may run later.
	var m string
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if m = string(body); acked.MatchString(m) && retried.MatchString(m) {
			break
		}
	}
	if !acked.MatchString(m) || !retried.MatchString(m) {
		t.Fatalf("/metrics has not 10 acked handlings and 1 retried (id 7):\n%s", grep(m, "inbox_handlings"))
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
