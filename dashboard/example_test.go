package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sqlinbox/sqlinbox/dashboard"
	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// requireAdmin stands for your service's own authentication middleware.
func requireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Admin") != "yes" {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// The dashboard mounted at /admin/inbox inside a service, behind the
// service's own authentication.
func Example() {
	b, err := inbox.Open("sqlite://:memory:")
	if err != nil {
		panic(err)
	}
	defer b.Close()
	if err := migrations.ApplyRegistry(context.Background(), b.DB()); err != nil {
		panic(err)
	}

	h, err := dashboard.New(b) // dashboard.ReadOnly() shows no actions
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/inbox/", http.StripPrefix("/admin/inbox", requireAdmin(h)))

	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, admin := range []string{"no", "yes"} {
		req, _ := http.NewRequest("GET", srv.URL+"/admin/inbox/", nil)
		req.Header.Set("X-Admin", admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(admin, resp.StatusCode)
	}
	// Output:
	// no 403
	// yes 200
}
