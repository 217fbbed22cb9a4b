package dialect

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The server is told by its version string; one too old is refused by
// name, with the version it needs.
func TestCheckServer(t *testing.T) {
	for _, c := range []struct {
		version string
		mariaDB bool
		refused string // "" for accepted
	}{
		{"10.11.6-MariaDB-0+deb12u1", true, ""},
		{"10.6.0-MariaDB", true, ""},
		{"11.4.2-MariaDB-log", true, ""},
		{"5.5.5-10.11.6-MariaDB", true, ""},
		{"10.5.23-MariaDB", true, "MariaDB 10.6 or later"},
		{"10.3.39-MariaDB-0+deb10u1", true, "MariaDB 10.6 or later"},
		{"8.0.36", false, ""},
		{"8.4.0-commercial", false, ""},
		{"9.1.0", false, ""},
		{"8.0.13", false, ""},
		{"5.7.44-log", false, "MySQL 8.0.13 or later"},
		{"8.0.12", false, "MySQL 8.0.13 or later"}, // no expression defaults
	} {
		s := Server{Version: c.version}
		err := checkServer(&s)
		if s.MariaDB != c.mariaDB {
			t.Errorf("%s: MariaDB %v, want %v", c.version, s.MariaDB, c.mariaDB)
		}
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%s refused: %v", c.version, err)
		case c.refused != "" && (err == nil || !errors.Is(err, ErrServerVersion) || !strings.Contains(err.Error(), c.refused) || !strings.Contains(err.Error(), c.version)):
			t.Errorf("%s: %v, want ErrServerVersion naming the version and %q", c.version, err, c.refused)
		}
	}
}

// Until the server is probed, and on MySQL 8, no statement returns rows
// from INSERT or DELETE; MariaDB's do.
func TestReturnsByServer(t *testing.T) {
	tbl := Table{Name: "`jobs`", ID: "`id`", LockedUntil: "`locked_until`", Columns: []string{"`payload`"}}
	ins := Insert{Table: "`jobs`", Columns: []string{"`payload`"}, LockedUntil: "`locked_until`", ID: "`id`"}
	batch := Batch{Table: "`jobs`", Columns: []string{"`payload`"}, LockedUntil: "`locked_until`", Returning: []string{"`id`"}}
	for _, c := range []struct {
		name    string
		server  *Server
		returns bool
	}{
		{"not probed", nil, false},
		{"MySQL 8", &Server{Version: "8.0.36", AutoincLockMode: 2, Increment: 1}, false},
		{"MariaDB", &Server{Version: "10.11.6-MariaDB", MariaDB: true, AutoincLockMode: 1, Increment: 1}, true},
	} {
		d := Of(MySQL)
		if c.server != nil {
			d.server.Store(c.server)
		}
		tm := Times{Kind: MySQL, Encoding: EncodingFor(MySQL, "")}
		s := d.Inbox(tbl, tm)
		ack, err := s.AckMany.Call([]Fenced{{ID: 1, Lease: time.Unix(1, 0)}})
		if err != nil {
			t.Fatal(err)
		}
		texts := []string{ack.SQL, d.Publish(ins, tm).sql, d.PublishMany(batch, tm, 3)}
		for _, q := range texts {
			if strings.Contains(q, "RETURNING") != c.returns {
				t.Errorf("%s: RETURNING in %q: %v, want %v", c.name, q, !c.returns, c.returns)
			}
		}
		if s.AckMany.Returns() != c.returns || d.Publish(ins, tm).Returns() != c.returns || d.Returns() != c.returns {
			t.Errorf("%s: Returns() disagrees with %v", c.name, c.returns)
		}
		if _, ok := d.ConsecutiveIDs(); ok != (c.server != nil && c.server.AutoincLockMode < 2) {
			t.Errorf("%s: ConsecutiveIDs %v", c.name, ok)
		}
	}
}
