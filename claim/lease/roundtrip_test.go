package lease

import (
	"context"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/clock"
	"github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
)

// On Postgres a claim starts a measure of the database's own round trip (a
// ping beside it, once a second at most); on loopback it reads well under
// claim.FarRoundTrip, so neither a second claim nor a second ack statement
// goes out. On SQLite nothing is measured.
func TestRoundTripMeasuredBesideClaims(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c, _ := newClaimer(t, testdb.Postgres(t), clk, 10)
	if _, err := c.Claim(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	// The claim waited for its measure; one more reads too.
	c.trip.measure(context.Background(), c.env.DB)
	rt := c.RoundTrip()
	t.Logf("round trip on loopback: %v", rt)
	if rt <= 0 || rt >= time.Second {
		t.Fatalf("round trip %v, want above zero and well under a second", rt)
	}
	if rt < claim.FarRoundTrip && c.acks.flushers() != 1 {
		t.Errorf("round trip %v: %d ack statements in flight, want 1", rt, c.acks.flushers())
	}

	s, _ := newClaimer(t, testdb.SQLite(t), clk, 10)
	if _, err := s.Claim(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	if rt := s.RoundTrip(); rt != 0 {
		t.Errorf("SQLite: round trip %v measured, want none", rt)
	}
}
