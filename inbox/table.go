package inbox

import (
	"bytes"
	"database/sql"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/jmoiron/sqlx/reflectx"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// Role is what a column does in an inbox table.
type Role string

// The roles a struct's `inbox:"..."` tag names. ID, LockedUntil and Payload
// are required; the others are optional.
const (
	RoleID          Role = "id"
	RoleLockedUntil Role = "locked_until"
	RolePayload     Role = "payload"
	RoleGroup       Role = "group"
	RoleAttempts    Role = "attempts"
	RoleLastError   Role = "last_error"
	RoleCreatedAt   Role = "created_at"
	// RoleKey is a text column with a unique index: a publish whose key is
	// already queued writes nothing (see ErrDuplicate). Empty means no key.
	RoleKey Role = "key"
	// RolePriority is a smallint: claims take lower values first, then
	// lower ids.
	RolePriority Role = "priority"
	// RoleTrace is a text column for the producer's trace context, a W3C
	// traceparent: Publish fills an empty one from its context when the
	// broker has WithTraceContext, and Hooks.Started receives it.
	RoleTrace Role = "trace"
)

var knownRoles = map[Role]bool{RoleID: true, RoleLockedUntil: true, RolePayload: true, RoleGroup: true, RoleAttempts: true, RoleLastError: true, RoleCreatedAt: true, RoleKey: true, RolePriority: true, RoleTrace: true}

// field is one tagged field of the user's struct.
type field struct {
	column    string
	role      Role // empty for a column with no role
	generated bool // the database writes it (inbox:"id,generated")
	index     []int
	typ       reflect.Type
}

// shape is what a struct's tags say of its table: one place for the roles.
type shape struct {
	typ    reflect.Type
	fields []field
	byRole map[Role]*field
}

var mapper = reflectx.NewMapperFunc("db", func(s string) string { return s })

// shapeOf reads the `db` and `inbox` tags of struct type t.
func shapeOf(t reflect.Type) (*shape, error) {
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("inbox: a queue's row type must be a struct, got %v", t)
	}
	s := &shape{typ: t, byRole: map[Role]*field{}}
	tm := mapper.TypeMap(t)
	for _, fi := range tm.Index {
		col := fi.Field.Tag.Get("db")
		if col == "" || col == "-" || fi.Field.Anonymous {
			if role, ok := fi.Field.Tag.Lookup("inbox"); ok && !fi.Field.Anonymous {
				return nil, fmt.Errorf("inbox: %v.%s is tagged inbox:%q but has no db tag naming its column: add one, e.g. `db:\"%s\" inbox:\"%s\"`",
					t, fi.Field.Name, role, strings.Split(role, ",")[0], role)
			}
			continue
		}
		if err := scannable(fi.Field.Type); err != nil {
			return nil, fmt.Errorf("inbox: %v.%s (column %q): %w", t, fi.Field.Name, col, err)
		}
		if !fi.Field.IsExported() {
			return nil, fmt.Errorf("inbox: %v.%s has a db tag but is not exported", t, fi.Field.Name)
		}
		if err := dialect.CheckIdent(col); err != nil {
			return nil, fmt.Errorf("inbox: %v.%s: column name: %w", t, fi.Field.Name, err)
		}
		f := field{column: col, index: fi.Index, typ: fi.Field.Type}
		if tag, ok := fi.Field.Tag.Lookup("inbox"); ok {
			parts := strings.Split(tag, ",")
			f.role = Role(strings.TrimSpace(parts[0]))
			if !knownRoles[f.role] {
				return nil, fmt.Errorf("inbox: %v.%s: unknown role %q in inbox tag; roles are id, locked_until, payload, group, attempts, last_error, created_at, key, priority, trace", t, fi.Field.Name, parts[0])
			}
			for _, opt := range parts[1:] {
				switch strings.TrimSpace(opt) {
				case "generated":
					f.generated = true
				default:
					return nil, fmt.Errorf("inbox: %v.%s: unknown option %q in inbox tag (only \"generated\")", t, fi.Field.Name, opt)
				}
			}
			if s.byRole[f.role] != nil {
				return nil, fmt.Errorf("inbox: %v: role %q is tagged on two fields", t, f.role)
			}
		}
		for _, other := range s.fields {
			if other.column == col {
				return nil, fmt.Errorf("inbox: %v: column %q is tagged on two fields", t, col)
			}
		}
		s.fields = append(s.fields, f)
		if f.role != "" {
			s.byRole[f.role] = &s.fields[len(s.fields)-1]
		}
	}
	// Pointers into s.fields were taken while it grew: take them again.
	for i := range s.fields {
		if r := s.fields[i].role; r != "" {
			s.byRole[r] = &s.fields[i]
		}
	}
	for _, r := range []Role{RoleID, RoleLockedUntil, RolePayload} {
		if s.byRole[r] == nil {
			return nil, fmt.Errorf("inbox: %v has no field tagged inbox:%q; a queue's struct needs id, locked_until and payload, e.g. `db:\"%s\" inbox:\"%s\"`", t, r, r, r)
		}
	}
	if k := s.byRole[RoleID].typ.Kind(); k < reflect.Int || k > reflect.Uint64 {
		return nil, fmt.Errorf("inbox: %v: the id field must be an integer, got %v", t, s.byRole[RoleID].typ)
	}
	if s.byRole[RoleLockedUntil].typ != reflect.TypeFor[time.Time]() && s.byRole[RoleLockedUntil].typ != reflect.TypeFor[*time.Time]() && s.byRole[RoleLockedUntil].typ != reflect.TypeFor[sql.NullTime]() {
		return nil, fmt.Errorf("inbox: %v: the locked_until field must be time.Time, *time.Time or sql.NullTime, got %v", t, s.byRole[RoleLockedUntil].typ)
	}
	if f := s.byRole[RoleTrace]; f != nil && f.typ != reflect.TypeFor[*string]() && f.typ != reflect.TypeFor[sql.NullString]() && f.typ.Kind() != reflect.String {
		return nil, fmt.Errorf("inbox: %v: the trace field must be a string, *string or sql.NullString, got %v", t, f.typ)
	}
	return s, nil
}

var scannerType = reflect.TypeFor[sql.Scanner]()

// scannable refuses a field type a claim could not scan a column into
// (a struct, map, slice or array that does not scan itself), so the type
// fails when the queue is made rather than at every row's scan.
func scannable(t reflect.Type) error {
	if reflect.PointerTo(t).Implements(scannerType) || t.Implements(scannerType) {
		return nil
	}
	base := t
	for base.Kind() == reflect.Pointer {
		base = base.Elem()
		if reflect.PointerTo(base).Implements(scannerType) {
			return nil
		}
	}
	switch base.Kind() {
	case reflect.Struct:
		if base == reflect.TypeFor[time.Time]() {
			return nil
		}
	case reflect.Slice:
		if base.Elem().Kind() == reflect.Uint8 {
			return nil
		}
	case reflect.Map, reflect.Array, reflect.Chan, reflect.Func, reflect.Complex64, reflect.Complex128, reflect.UnsafePointer:
	default:
		return nil
	}
	return fmt.Errorf("type %v cannot be scanned from a column: use []byte, string, json.RawMessage, a number, time.Time, or a type whose pointer implements sql.Scanner (and driver.Valuer, for Publish); decode JSON in the handler", t)
}

// readsText reports whether a claim reads f through textScan: a payload
// of a string kind (NULL reads as ""), and any field of a named byte-slice
// type such as json.RawMessage, which database/sql fills from bytes but
// neither from text nor from NULL. Both are what payload columns hold:
// TEXT and JSON columns give text on SQLite and Postgres, and any of them
// may be NULL. Types that scan themselves keep their own Scan.
func (f field) readsText() bool {
	if reflect.PointerTo(f.typ).Implements(scannerType) || f.typ.Implements(scannerType) {
		return false
	}
	switch {
	case f.typ.Kind() == reflect.String:
		return f.role == RolePayload
	case f.typ.Kind() == reflect.Slice && f.typ.Elem().Kind() == reflect.Uint8:
		return f.typ != reflect.TypeFor[[]byte]()
	}
	return false
}

// textScan reads a column's text, bytes or NULL into a field of a string
// or byte-slice kind (see field.readsText).
type textScan struct{ v reflect.Value }

func (s textScan) Scan(src any) error {
	var b []byte
	switch x := src.(type) {
	case nil:
		s.v.SetZero()
		return nil
	case string:
		b = []byte(x)
	case []byte:
		b = x
	default:
		return fmt.Errorf("cannot store a %T into %v: the column holds neither text nor bytes", src, s.v.Type())
	}
	if s.v.Kind() == reflect.String {
		s.v.SetString(string(b))
	} else {
		s.v.SetBytes(bytes.Clone(b)) // the driver reuses its buffer
	}
	return nil
}

// column returns the column of role r, or "" when the struct has none.
func (s *shape) column(r Role) string {
	if f := s.byRole[r]; f != nil {
		return f.column
	}
	return ""
}

// scanned are the fields a claim scans straight from the row: every tagged
// field except locked_until, which is set from the claim's decoded lease.
func (s *shape) scanned() []field {
	out := make([]field, 0, len(s.fields))
	for _, f := range s.fields {
		if f.role != RoleLockedUntil {
			out = append(out, f)
		}
	}
	return out
}

// setLease writes a claim's lease into the struct's locked_until field.
func (s *shape) setLease(v reflect.Value, at time.Time) {
	f := v.FieldByIndex(s.byRole[RoleLockedUntil].index)
	switch p := f.Addr().Interface().(type) {
	case *time.Time:
		*p = at
	case **time.Time:
		if !at.IsZero() {
			*p = &at
		}
	case *sql.NullTime:
		*p = sql.NullTime{Time: at, Valid: !at.IsZero()}
	}
}
