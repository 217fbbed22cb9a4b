package inbox

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// FuzzShape builds struct types with fuzzed db and inbox tags: the tag
// parser never panics, and whatever it accepts names only checked
// identifiers and has every required role exactly once.
func FuzzShape(f *testing.F) {
	f.Add("id", "id,generated", "payload", "payload")
	f.Add(`id"; DROP TABLE x; --`, "id", "payload", "payload")
	f.Add("id", "id,generated,extra", "data", "payload")
	f.Add("id", "group", "payload", "payload")
	f.Add("", "", "-", "payload")
	f.Fuzz(func(t *testing.T, idCol, idTag, payloadCol, payloadTag string) {
		if strings.ContainsAny(idCol+idTag+payloadCol+payloadTag, "`\"\x00") {
			// Go struct tags cannot hold these unescaped; reflect would
			// read a different tag, not a wrong one.
			return
		}
		typ := reflect.StructOf([]reflect.StructField{
			{Name: "ID", Type: reflect.TypeFor[int64](), Tag: reflect.StructTag(`db:"` + idCol + `" inbox:"` + idTag + `"`)},
			{Name: "LockedUntil", Type: reflect.TypeFor[*time.Time](), Tag: `db:"locked_until" inbox:"locked_until"`},
			{Name: "Payload", Type: reflect.TypeFor[[]byte](), Tag: reflect.StructTag(`db:"` + payloadCol + `" inbox:"` + payloadTag + `"`)},
		})
		s, err := shapeOf(typ)
		if err != nil {
			return
		}
		for _, f := range s.fields {
			if dialect.CheckIdent(f.column) != nil {
				t.Fatalf("accepted column %q", f.column)
			}
		}
		for _, r := range []Role{RoleID, RoleLockedUntil, RolePayload} {
			if s.column(r) == "" {
				t.Fatalf("accepted a shape without %s", r)
			}
		}
	})
}
