package inbox_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

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

// fakePostgres answers every connection's startup with a FATAL error of
// code, as a server refusing a password or still starting up would, and
// reports each attempt on tries.
func fakePostgres(t *testing.T, code string) (url string, tries chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	tries = make(chan struct{}, 100)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				be := pgproto3.NewBackend(c, c)
				msg, err := be.ReceiveStartupMessage()
				if _, ok := msg.(*pgproto3.SSLRequest); ok && err == nil {
					if _, err := c.Write([]byte("N")); err != nil {
						return
					}
					msg, err = be.ReceiveStartupMessage()
				}
				if err != nil {
					return
				}
				select {
				case tries <- struct{}{}:
				default:
				}
				be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: code, Message: "refused by the fake server"})
				_ = be.Flush()
			}()
		}
	}()
	return "postgres://someone:s3cret@" + ln.Addr().String() + "/db?sslmode=disable", tries
}

// Failed authentication is returned at once; a server starting up (57P03)
// is waited for, retried with backoff until the subscription is stopped.
func TestFailedAuthReturnedStartingUpRetried(t *testing.T) {
	url, _ := fakePostgres(t, "28P01")
	b, err := inbox.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sub, err := inbox.Subscribe(b, inbox.MustQueue[Job]("jobs"), func(context.Context, Job) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	err = runWithin(t, sub.Run)
	var ce *inbox.ConnectionError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "password") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("failed authentication: %v", err)
	}

	url, tries := fakePostgres(t, "57P03")
	b2, err := inbox.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	sub, err = inbox.Subscribe(b2, inbox.MustQueue[Job]("jobs"), func(context.Context, Job) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	for i := range 3 { // the first try and two retries
		select {
		case <-tries:
		case err := <-done:
			t.Fatalf("Run returned while the server was starting up (after %d tries): %v", i, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("%d tries in 30s", i)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after stop: %v", err)
	}
}
