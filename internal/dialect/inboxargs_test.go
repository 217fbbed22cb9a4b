package dialect

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var placeholder = regexp.MustCompile(`[$?](\d+)`)

// Every inbox statement's Call gives as many arguments as its text has
// parameters, each of them used, on every dialect and for every shape of
// table: the order a Call writes is the order its text reads.
func TestInboxCallsMatchTheirParameters(t *testing.T) {
	tables := map[string]Table{
		"bare":       {Name: `"t"`, ID: `"id"`, LockedUntil: `"locked_until"`},
		"every role": {Name: `"t"`, ID: `"id"`, LockedUntil: `"locked_until"`, Group: `"grp"`, Attempts: `"attempts"`, LastError: `"last_error"`, Columns: []string{`"payload"`}, OneHeap: true},
		"priority":   {Name: `"t"`, ID: `"id"`, LockedUntil: `"locked_until"`, Attempts: `"attempts"`, Priority: `"priority"`},
	}
	for _, kind := range []Kind{SQLite, Postgres} {
		d := Of(kind)
		for name, tbl := range tables {
			for _, inDB := range []bool{false, true} {
				tm := Times{Kind: kind, Encoding: EncodingFor(kind, "DATETIME"), InDatabase: inDB}
				checkCalls(t, fmt.Sprintf("%v, %s table, database clock %v", kind, name, inDB), d.Inbox(tbl, tm))
			}
		}
	}
}

// The registry's statements likewise.
func TestRegistryCallsMatchTheirParameters(t *testing.T) {
	for _, kind := range []Kind{SQLite, Postgres} {
		checkCalls(t, kind.String(), Of(kind).Registry())
	}
}

// checkCalls checks every statement of stmts, a struct of statement types.
func checkCalls(t *testing.T, where string, stmts any) {
	t.Helper()
	s := reflect.ValueOf(stmts)
	for i := range s.NumField() {
		field := s.Type().Field(i).Name
		stmt := s.Field(i)
		if !stmt.MethodByName("SQL").IsValid() { // a group of statements (LockSQL.MySQL)
			checkCalls(t, where+": "+field, stmt.Interface())
			continue
		}
		sql := stmt.MethodByName("SQL").Call(nil)[0].String()
		if sql == "" {
			continue
		}
		call := stmt.MethodByName("Call")
		in := make([]reflect.Value, call.Type().NumIn())
		for j := range in {
			in[j] = reflect.Zero(call.Type().In(j))
		}
		checkCall(t, where+": "+field, call.Call(in)[0].Interface().(Call))
	}
}

// checkCall checks that c gives as many arguments as its text reads
// parameters, and that its text reads each of them.
func checkCall(t *testing.T, what string, c Call) {
	t.Helper()
	used := map[string]bool{}
	for _, m := range placeholder.FindAllStringSubmatch(c.SQL, -1) {
		used[m[1]] = true
	}
	if len(used) != len(c.Args) {
		t.Errorf("%s has %d parameters, its Call gives %d arguments\n%s", what, len(used), len(c.Args), c.SQL)
	}
	for n := 1; n <= len(c.Args); n++ {
		if !used[strconv.Itoa(n)] {
			t.Errorf("%s never reads parameter %d\n%s", what, n, c.SQL)
		}
	}
}

// A one-row publish, with and without a key, a notification and the
// database clock.
func TestPublishCallMatchesItsParameters(t *testing.T) {
	for _, kind := range []Kind{SQLite, Postgres} {
		for _, inDB := range []bool{false, true} {
			for _, notify := range []bool{false, kind == Postgres} {
				for _, key := range []string{"", `"key"`} {
					tm := Times{Kind: kind, Encoding: EncodingFor(kind, "DATETIME"), InDatabase: inDB}
					in := Insert{Table: `"t"`, Columns: []string{`"payload"`, `"key"`}, LockedUntil: `"locked_until"`, ID: `"id"`, Key: key, Notify: notify}
					c := Of(kind).Publish(in, tm).Call([]any{"p", "k"}, nil, nil, "t", "")
					checkCall(t, fmt.Sprintf("%v publish, database clock %v, notify %v, key %q", kind, inDB, notify, key), c)
				}
			}
		}
	}
}

// The lock store's statements likewise.
func TestLockCallsMatchTheirParameters(t *testing.T) {
	for _, kind := range []Kind{SQLite, Postgres} {
		checkCalls(t, kind.String(), Of(kind).Lock())
	}
	// MySQL's ? are not numbered: its calls are checked by count, against
	// the $n text they were written in (the order each Call reorders to).
	l := Of(MySQL).Lock()
	for what, c := range map[string]Call{
		"Extend":   l.Extend.Call("ns", "n", 0, "s", time.Time{}, time.Second),
		"Release":  l.Release.Call("ns", "n", 0, "s", "", time.Time{}),
		"Sweep":    l.Sweep.Call(time.Time{}),
		"Places":   l.MySQL.Places.Call("ns", "n", 1),
		"Take":     l.MySQL.Take.Call("ns", "n", 0, "s", time.Time{}),
		"Insert":   l.MySQL.Insert.Call("ns", "n", 0, "s", time.Time{}),
		"Draw":     l.MySQL.Draw.Call(),
		"SetFence": l.MySQL.SetFence.Call("ns", "n", 0, 1),
	} {
		if n := strings.Count(c.SQL, "?"); n != len(c.Args) {
			t.Errorf("mysql %s reads %d parameters, its Call gives %d\n%s", what, n, len(c.Args), c.SQL)
		}
	}
}

// The schedule package's statements likewise, for both clocks.
func TestScheduleCallsMatchTheirParameters(t *testing.T) {
	for _, kind := range []Kind{SQLite, Postgres} {
		for _, inDB := range []bool{false, true} {
			tm := Times{Kind: kind, Encoding: EncodingFor(kind, "DATETIME"), InDatabase: inDB}
			checkCalls(t, fmt.Sprintf("%v, database clock %v", kind, inDB), Of(kind).Schedule(tm))
		}
	}
}

// And the statements of one each: operators' listings, the key look-up
// and the idle poll of groups (with and without a priority column, both
// clocks).
func TestOtherCallsMatchTheirParameters(t *testing.T) {
	for _, kind := range []Kind{SQLite, Postgres} {
		d := Of(kind)
		checkCalls(t, kind.String(), d.ScheduleInspect())
		for _, inDB := range []bool{false, true} {
			tm := Times{Kind: kind, Encoding: EncodingFor(kind, "DATETIME"), InDatabase: inDB}
			group := Table{Name: `"t"`, ID: `"id"`, LockedUntil: `"locked_until"`, Group: `"grp"`}
			priority := group
			priority.Priority = `"priority"`
			bare := Table{Name: `"t"`, ID: `"id"`, LockedUntil: `"locked_until"`}
			checkCalls(t, fmt.Sprintf("%v, database clock %v", kind, inDB), struct {
				LockPlaces                  LockPlacesSQL
				ByKey                       ByKeySQL
				GroupsAvailable, ByPriority GroupsAvailableSQL
				Notify                      NotifySQL
				QueueRows, BareRows         QueueRowsSQL
			}{d.LockPlaces(), d.ByKey(`"t"`, `"id"`, `"key"`), d.GroupsAvailable(group, tm), d.GroupsAvailable(priority, tm),
				d.Notify(), d.QueueRows(group), d.QueueRows(bare)})
		}
	}
}

// The operator's count by state, listings and changes, with and without a
// filter's parameters.
func TestCountStatesCallMatchesItsParameters(t *testing.T) {
	group := "g"
	for _, kind := range []Kind{SQLite, Postgres} {
		d := Of(kind)
		tbl := AdminTable{Table: Table{Name: `"t"`, ID: `"id"`, LockedUntil: `"locked_until"`, Group: `"grp"`, LastError: `"last_error"`},
			Times: Times{Kind: kind, Encoding: EncodingFor(kind, "DATETIME")}}
		for _, f := range []AdminFilter{{}, {Group: &group, IDs: []int64{1, 2}, ErrorContains: "x", States: []string{StateParked}}} {
			count, err := d.CountStates(tbl, f)
			if err != nil {
				t.Fatalf("%v: %v", kind, err)
			}
			checkCalls(t, fmt.Sprintf("%v, filter %+v", kind, f), struct{ CountStates CountStatesSQL }{count})
			// The operator's other statements take the filter's parameters
			// alone.
			scan, err := d.ScanEnd(tbl, f, 10)
			if err != nil {
				t.Fatal(err)
			}
			list, err := d.ListRows(tbl, f, 10)
			if err != nil {
				t.Fatal(err)
			}
			checkCall(t, fmt.Sprintf("%v scan end, filter %+v", kind, f), scan)
			checkCall(t, fmt.Sprintf("%v list, filter %+v", kind, f), list)
			for _, c := range []Change{ChangeUnpark, ChangeRunNow, ChangeDelete} {
				change, err := d.ChangeRows(tbl, f, c)
				if err != nil {
					t.Fatal(err)
				}
				checkCall(t, fmt.Sprintf("%v change %d, filter %+v", kind, c, f), change)
			}
		}
	}
}
