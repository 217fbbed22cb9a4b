package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// The standalone dashboard serves a registered queue behind basic auth at
// its prefix, and refuses an address off loopback without --public and
// --basic-auth.
func TestDashboardCommand(t *testing.T) {
	url := inboxtest.SQLite(t)
	service(t, url) // a registered service, so there is a queue to show
	for _, args := range [][]string{
		{"--listen", "0.0.0.0:0"},
		{"--listen", "0.0.0.0:0", "--public"},
		{"--basic-auth", "nocolon"},
	} {
		root := newRoot()
		root.SetOut(io.Discard)
		root.SetArgs(append([]string{"dashboard", "--db", url}, args...))
		err := root.ExecuteContext(context.Background())
		if err == nil {
			t.Fatalf("dashboard %v: started, want refused", args)
		}
		t.Logf("dashboard %v: %v", args, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	root := newRoot()
	root.SetOut(pw)
	root.SetArgs([]string{"dashboard", "--db", url, "--listen", "127.0.0.1:0", "--basic-auth", "ops:s3cret", "--prefix", "/admin/inbox"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx); pw.Close() }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dashboard: %v", err)
		}
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no address printed: %v", err)
	}
	go io.Copy(io.Discard, pr)
	addr := strings.TrimSpace(line[strings.Index(line, "http://"):])
	t.Logf("serving at %s", addr)

	resp, err := http.Get(addr)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without credentials: %d, want 401", resp.StatusCode)
	}
	req, _ := http.NewRequest("GET", addr, nil)
	req.SetBasicAuth("ops", "s3cret")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `href="queue?table=jobs"`) {
		t.Fatalf("with credentials: %d\n%s", resp.StatusCode, body)
	}
}

// On a database without the registry, the command says how to create it.
func TestDashboardCommandWithoutRegistry(t *testing.T) {
	url := inboxtest.SQLite(t)
	keep := inboxtest.Open(t, url) // keeps the memory database alive
	if err := keep.Ping(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	root := newRoot()
	root.SetOut(pw)
	root.SetArgs([]string{"dashboard", "--db", url, "--listen", "127.0.0.1:0"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx); pw.Close() }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dashboard: %v", err)
		}
	})
	r := bufio.NewReader(pr)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatalf("no address printed: %v", err)
	}
	line, err := r.ReadString('\n')
	if err != nil || !strings.Contains(line, "inbox migrate-registry --db") {
		t.Fatalf("second line %q (%v), want how to create the registry", line, err)
	}
	go io.Copy(io.Discard, r)
}
