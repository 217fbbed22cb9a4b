package inbox_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// A connection the database refuses for good (an unknown database, an
// unknown role, an unknown host) is returned from Service.Run and from
// Subscription.Run with the URL, its password hidden, and what to fix,
// instead of being retried forever. (A refused port is waited for:
// TestDatabaseUnreachableAtStartAndMidRun.)
func TestPermanentConnectionFailuresReturned(t *testing.T) {
	base, err := url.Parse(inboxtest.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		change func(u *url.URL)
		fix    string
	}{
		"unknown database": {func(u *url.URL) { u.Path = "/no_such_database_15" }, "database name"},
		"unknown role":     {func(u *url.URL) { u.User = url.UserPassword("no_such_role_15", "s3cret") }, "user name"},
	}
	if _, err := net.DefaultResolver.LookupHost(context.Background(), "no-such-host.invalid"); isNotFound(err) {
		cases["unknown host"] = struct {
			change func(u *url.URL)
			fix    string
		}{func(u *url.URL) { u.Host = "no-such-host.invalid:5432" }, "host name"}
	} else {
		t.Logf("the resolver here does not say a name is unknown (%v): the unknown host case is left out", err)
	}
	// A malformed URL is refused at Open, its password hidden.
	for _, bad := range []string{"postgres://u:s3cret@127.0.0.1:notaport/db", "postgres://u:s3cret@[::1/db"} {
		b, err := inbox.Open(bad)
		if err == nil {
			b.Close()
			t.Fatalf("Open(%s) accepted", bad)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("Open of a malformed URL shows its password: %v", err)
		}
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			u := *base
			c.change(&u)
			b, err := inbox.Open(u.String())
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			check := func(what string, err error) {
				t.Helper()
				var ce *inbox.ConnectionError
				if !errors.As(err, &ce) {
					t.Fatalf("%s returned %v, want a *inbox.ConnectionError", what, err)
				}
				msg := err.Error()
				if strings.Contains(msg, "s3cret") || !strings.Contains(msg, c.fix) || !strings.Contains(msg, "postgres://") {
					t.Fatalf("%s: %s", what, msg)
				}
				t.Logf("%s: %s", what, msg)
			}
			svc := inbox.NewService("connfail", "test", b)
			svc.Signals = false
			sub, err := inbox.Handle(svc, inbox.MustQueue[Job]("jobs"), func(context.Context, Job) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			check("Service.Run", runWithin(t, svc.Run))
			check("Subscription.Run", runWithin(t, sub.Run))
		})
	}
}

// runWithin runs f and returns its error, failing the test if it has not
// returned within 30 s.
func runWithin(t *testing.T, f func(context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		cancel()
		<-done
		t.Fatal("still retrying after 30s")
		return nil
	}
}

func isNotFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}
