package main

import (
	"context"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// An operator command on a database that does not exist says so, with the
// URL less its password, and creates nothing.
func TestMissingDatabase(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "missing.db")
		for _, args := range [][]string{{"queues"}, {"instances"}, {"rows", "--table", "jobs"}, {"pause", "--table", "jobs"}} {
			msg := inboxFails(t, append(args, "--db", "sqlite://"+path)...)
			if !strings.Contains(msg, "does not exist") || strings.Contains(msg, "ApplyRegistry") {
				t.Fatalf("inbox %s on a missing SQLite file: %s", args[0], msg)
			}
			if _, err := os.Stat(path); err == nil {
				t.Fatalf("inbox %s created %s", args[0], path)
			}
		}
		// The dashboard refuses it too, rather than serve an empty database.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		root := newRoot()
		root.SetArgs([]string{"dashboard", "--db", "sqlite://" + path, "--listen", "127.0.0.1:0"})
		root.SetOut(io.Discard)
		if err := root.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("dashboard on a missing SQLite file: %v", err)
		}
		if _, err := os.Stat(path); err == nil {
			t.Fatalf("dashboard created %s", path)
		}

		inboxCmd(t, "migrate-registry", "--db", "sqlite://"+path)
		inboxCmd(t, "queues", "--db", "sqlite://"+path)
	})
	for _, c := range []struct{ name, url string }{{"postgres", inboxtest.PostgresEnv}, {"mysql", inboxtest.MySQLEnv}} {
		t.Run(c.name, func(t *testing.T) {
			base := os.Getenv(c.url)
			if base == "" {
				t.Skipf("%s is not set: skipping a %s test", c.url, c.name)
			}
			u, err := url.Parse(base)
			if err != nil {
				t.Fatal(err)
			}
			u.Path = "/sqlinbox_no_such_database"
			secret := "s3cret-pw"
			if pw, ok := u.User.Password(); ok {
				secret = pw
			} else if c.name == "postgres" { // the test server trusts its clients: a password is not checked
				u.User = url.UserPassword(u.User.Username(), secret)
			}
			msg := inboxFails(t, "queues", "--db", u.String())
			if !strings.Contains(msg, "database") || !strings.Contains(msg, "sqlinbox_no_such_database") || !strings.Contains(msg, "does not exist") {
				t.Fatalf("queues on a database that does not exist: %s", msg)
			}
			if strings.Contains(msg, secret) || strings.Contains(msg, "ApplyRegistry") {
				t.Fatalf("queues on a database that does not exist: %s", msg)
			}
		})
	}
}
