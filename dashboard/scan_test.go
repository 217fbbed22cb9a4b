package dashboard_test

import (
	"net/http"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/dashboard"
)

// A state's view reads the key a window at a time: with the budget spent
// after each window, every page says how far it searched and links to the
// rest, and following the links finds each parked row once; with time to
// spare, one page finds them all.
func TestStateViewScansInWindows(t *testing.T) {
	eachDB(t, func(t *testing.T, dbURL string) {
		s := newSite(t, dbURL, dashboard.PageSize(5), dashboard.WithScan(4, -1))
		never := any(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC))
		if s.b.Dialect() == "sqlite" {
			never = "9999-12-31 00:00:00.000"
		}
		var parked []string
		for i := 1; i <= 30; i++ {
			lu := s.far() // delayed: the running service leaves it
			if i == 5 || i == 25 {
				lu = never
			}
			var id int64
			if err := s.b.DB().QueryRow(s.rebind("INSERT INTO jobs (payload, locked_until) VALUES ($1, $2) RETURNING id"), []byte("row"), lu).Scan(&id); err != nil {
				t.Fatal(err)
			}
			if i == 5 || i == 25 {
				parked = append(parked, itoa(id))
			}
		}
		c := client(t)
		rowID := regexp.MustCompile(`<tr data-id="(\d+)"`)
		next := regexp.MustCompile(`href="(queue\?[^"]+)" id="next"`)

		var seen []string
		page, pages := "queue?table=jobs&state=parked", 0
		for page != "" {
			pages++
			if pages > 20 {
				t.Fatalf("more than 20 pages for 30 rows in windows of 4")
			}
			code, body := get(t, c, s.url(page))
			if code != http.StatusOK {
				t.Fatalf("%s: %d\n%s", page, code, body)
			}
			for _, m := range rowID.FindAllStringSubmatch(body, -1) {
				seen = append(seen, m[1])
			}
			page = ""
			if m := next.FindStringSubmatch(body); m != nil {
				contains(t, body, `found, searched ids through`)
				page = regexp.MustCompile(`&amp;`).ReplaceAllString(m[1], "&")
			}
		}
		if !slices.Equal(seen, parked) || pages < 7 {
			t.Fatalf("windows of 4: parked rows %v over %d pages, want %v over at least 7", seen, pages, parked)
		}
		t.Logf("windows of 4 rows: %d pages", pages)

		h, err := dashboard.New(s.b, dashboard.PageSize(5), dashboard.WithScan(4, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		code, body := get(t, c, newServer(t, h)+"queue?table=jobs&state=parked")
		var all []string
		for _, m := range rowID.FindAllStringSubmatch(body, -1) {
			all = append(all, m[1])
		}
		if code != http.StatusOK || !slices.Equal(all, parked) || next.MatchString(body) {
			t.Fatalf("windows of 4 with time to spare: %d, rows %v, want %v on one page with no next:\n%s", code, all, parked, body)
		}
	})
}
