package schedule

import (
	"testing"
	"time"
)

func TestEveryIsAnchoredToTheEpoch(t *testing.T) {
	m, err := Every(time.Hour).compile(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ after, want time.Time }{
		{time.Date(2026, 3, 1, 10, 30, 0, 0, time.UTC), time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)},
		{time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC), time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)},
		{time.Date(1969, 12, 31, 22, 30, 0, 0, time.UTC), time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC)},
	} {
		if got := m.next(tc.after); !got.Equal(tc.want) {
			t.Errorf("next(%v) = %v, want %v", tc.after, got, tc.want)
		}
	}
}

func TestCronReadsItsZone(t *testing.T) {
	after := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		expr, zone string
		want       time.Time
	}{
		{"0 9 * * *", "Europe/Paris", time.Date(2026, 1, 1, 8, 0, 0, 0, time.UTC)},
		{"0 9 * * *", "", time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)},
		{"30 0 9 * * *", "America/New_York", time.Date(2026, 1, 1, 14, 0, 30, 0, time.UTC)},
		{"@daily", "Asia/Tokyo", time.Date(2026, 1, 1, 15, 0, 0, 0, time.UTC)},
	} {
		m, err := Cron(tc.expr, tc.zone).compile(after)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.expr, tc.zone, err)
		}
		got := m.next(after)
		zone := tc.zone
		if zone == "" {
			zone = "UTC"
		}
		if !got.Equal(tc.want) || got.Location().String() != zone {
			t.Errorf("cron %q in %q: next = %v, want %v in %s", tc.expr, tc.zone, got, tc.want, zone)
		}
	}
}
