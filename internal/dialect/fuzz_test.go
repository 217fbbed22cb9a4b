package dialect_test

import (
	"strings"
	"testing"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// FuzzCheckTableName: what the check accepts quotes into SQL that cannot
// break out of its quotes, whatever the input.
func FuzzCheckTableName(f *testing.F) {
	for _, s := range []string{"invoice_jobs", "app.jobs", "invoice_jobs; DROP TABLE x", `a"b`, "a.b.c", "", "_", "9x", "jobs--", "ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if dialect.CheckTableName(name) != nil {
			return
		}
		q := dialect.Quote(name)
		inner := strings.ReplaceAll(strings.Trim(q, `"`), `"."`, "")
		if strings.ContainsAny(inner, "\"';-/* \t\n\x00") {
			t.Fatalf("accepted %q, quoted as %s", name, q)
		}
		if len(name) > 2*dialect.MaxIdent+1 {
			t.Fatalf("accepted %d bytes", len(name))
		}
	})
}
