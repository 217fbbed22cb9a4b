package lock_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
	"github.com/sqlinbox/sqlinbox/lock"
)

// On MariaDB/MySQL the operators' list of held places (the dashboard's
// locks page) reads the holds back with their fence and an expiry in UTC,
// and names that differ in case only are two locks.
func TestMySQLPlaces(t *testing.T) {
	if os.Getenv(testdb.MySQLEnv) == "" {
		t.Skipf("%s is not set: skipping the MariaDB/MySQL lock store", testdb.MySQLEnv)
	}
	u := testdb.MySQL(t)
	l := locker(t, openSQL(t, u, true), "ops")
	a := mustTake(t, l, "Job", lock.TTL(time.Minute))
	b := mustTake(t, l, "job", lock.TTL(time.Minute))
	if b.Fence <= a.Fence {
		t.Errorf("fences %d then %d: want growing", a.Fence, b.Fence)
	}
	db, _, err := dialect.Open(u)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	places, err := lock.Places(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	if len(places) != 2 {
		t.Fatalf("places: %+v, want the two holds", places)
	}
	for i, want := range []lock.Hold{a, b} {
		p := places[i]
		left := time.Until(p.Expires)
		if p.Namespace != "ops" || p.Fence != want.Fence || left < 50*time.Second || left > time.Minute+5*time.Second {
			t.Errorf("place %d: %+v (expires in %v), want fence %d expiring in about a minute", i, p, left, want.Fence)
		}
	}
}
