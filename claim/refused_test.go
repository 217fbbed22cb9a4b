package claim_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sqlinbox/sqlinbox/claim/advisory"
	"github.com/sqlinbox/sqlinbox/claim/rowlock"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
)

// The lock forms are refused at Subscribe on SQLite, with an error that
// names the form, the database, the table and what to use instead; every
// form refuses a pool of one connection.
func TestFormsRefused(t *testing.T) {
	url := inboxtest.SQLite(t)
	b, err := inbox.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	q := inbox.MustQueue[Job]("invoice_jobs")
	for _, form := range []claim.Form{rowlock.Form, advisory.Form} {
		_, err := inbox.Subscribe(b, q, func(context.Context, Job) error { return nil }, inbox.Form(form))
		if err == nil {
			t.Fatalf("%s form on SQLite: Subscribe succeeded", form.Name())
		}
		for _, want := range []string{form.Name(), "sqlite", `"invoice_jobs"`, "Postgres", "lease"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s form on SQLite: error %q does not mention %q", form.Name(), err, want)
			}
		}
	}
	// MySQL 8 has no DELETE ... RETURNING, which the advisory form's acks use.
	t.Run("advisory/mysql8", func(t *testing.T) {
		b, err := inbox.Open(testdb.MySQL8(t, 1))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		_, err = inbox.Subscribe(b, q, func(context.Context, Job) error { return nil }, inbox.Form(advisory.Form))
		if err == nil {
			t.Fatal("advisory form on MySQL 8: Subscribe succeeded")
		}
		for _, want := range []string{"advisory", "MariaDB", "MySQL", "RETURNING", `"invoice_jobs"`, "lease"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("advisory form on MySQL 8: error %q does not mention %q", err, want)
			}
		}
	})
	for _, fc := range forms {
		if fc.fair {
			continue // the same form refused the same way
		}
		for _, kind := range fc.dbs {
			t.Run(fc.form.Name()+"/"+kind, func(t *testing.T) {
				u := inboxtest.SQLite(t)
				switch kind {
				case postgres:
					u = inboxtest.Postgres(t)
				case mysql, mysql8:
					u = inboxtest.MySQL(t)
				}
				db := inboxtest.Open(t, u)
				db.SetMaxOpenConns(1)
				b, err := inbox.New(db)
				if err != nil {
					t.Fatal(err)
				}
				_, err = inbox.Subscribe(b, q, func(context.Context, Job) error { return nil }, inbox.Form(fc.form))
				if err == nil || !strings.Contains(err.Error(), "one connection") || !strings.Contains(err.Error(), fc.form.Name()) {
					t.Errorf("%s form on a pool of one: Subscribe error %v, want one naming the pool and the form", fc.form.Name(), err)
				}
			})
		}
	}
}
