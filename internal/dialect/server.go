package dialect

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// What a MariaDB or MySQL server is, read once per pool (Dialect.Probe).
// MariaDB (10.5+) returns rows from INSERT and DELETE (RETURNING); MySQL 8
// does not, so there a publish reads its id from the insert's
// LAST_INSERT_ID and a batched ack counts the rows it deleted (see
// Returns). Until the server is known the statements written are MySQL
// 8's, which MariaDB runs as well.

// ErrServerVersion marks a server too old for the library: MariaDB before
// 10.6 or MySQL before 8.0.13 (no FOR UPDATE SKIP LOCKED, no JSON_TABLE, no
// expression defaults).
var ErrServerVersion = errors.New("database server too old")

// Server is a MariaDB or MySQL server as Probe read it.
type Server struct {
	Version string // as VERSION() answers, e.g. "10.11.6-MariaDB" or "8.0.36"
	MariaDB bool
	// AutoincLockMode is innodb_autoinc_lock_mode: at 0 or 1 a multi-row
	// INSERT's generated ids are consecutive; at 2 (MySQL 8's default)
	// InnoDB promises only that they rise.
	AutoincLockMode int
	// Increment is auto_increment_increment, the step between them.
	Increment int64
}

// asMySQL8 holds the MariaDB databases Probe takes for MySQL 8 (see
// ForceMySQL8): database name -> innodb_autoinc_lock_mode to take.
var asMySQL8 sync.Map

// ForceMySQL8 makes Probe take the MariaDB database named db for a MySQL 8
// server whose innodb_autoinc_lock_mode is lockMode, so that tests run the
// statements MySQL 8 runs on MariaDB. Tests only: each test's database has
// a name of its own.
func ForceMySQL8(db string, lockMode int) { asMySQL8.Store(db, lockMode) }

// Probe reads what the server behind db is, once per dialect: a no-op but
// on MySQL, and once known. It refuses a server too old for the library
// (ErrServerVersion) with what to run instead.
func (d *Dialect) Probe(ctx context.Context, db Querier) error {
	if d.Kind != MySQL || d.server.Load() != nil {
		return nil
	}
	rows, err := db.QueryContext(ctx, "SELECT VERSION(), @@innodb_autoinc_lock_mode, @@auto_increment_increment, COALESCE(DATABASE(), '')")
	if err != nil {
		return fmt.Errorf("mysql: read the server's version: %w", err)
	}
	defer rows.Close()
	var s Server
	var dbName string
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return fmt.Errorf("mysql: read the server's version: %w", err)
		}
		return fmt.Errorf("mysql: read the server's version: no row")
	}
	if err := rows.Scan(&s.Version, &s.AutoincLockMode, &s.Increment, &dbName); err != nil {
		return fmt.Errorf("mysql: read the server's version: %w", err)
	}
	rows.Close()
	if err := checkServer(&s); err != nil {
		return err
	}
	if mode, ok := asMySQL8.Load(dbName); ok && s.MariaDB {
		s.MariaDB, s.AutoincLockMode = false, mode.(int)
	}
	d.server.CompareAndSwap(nil, &s)
	return nil
}

// checkServer tells MariaDB from MySQL by the version string and refuses
// one older than the library needs.
func checkServer(s *Server) error {
	s.MariaDB = strings.Contains(s.Version, "MariaDB")
	if s.Increment < 1 {
		s.Increment = 1
	}
	major, minor, patch := versionOf(s.Version)
	switch {
	case s.MariaDB && (major < 10 || major == 10 && minor < 6):
		return fmt.Errorf("mysql: %w: MariaDB %s; the library needs MariaDB 10.6 or later (FOR UPDATE SKIP LOCKED, JSON_TABLE): upgrade the server", ErrServerVersion, s.Version)
	case !s.MariaDB && (major < 8 || major == 8 && minor == 0 && patch < 13):
		return fmt.Errorf("mysql: %w: MySQL %s; the library needs MySQL 8.0.13 or later (FOR UPDATE SKIP LOCKED, JSON_TABLE, expression defaults such as created_at's DEFAULT (UTC_TIMESTAMP(6))), or MariaDB 10.6 or later: upgrade the server", ErrServerVersion, s.Version)
	}
	return nil
}

// versionOf reads the major, minor and patch numbers at the front of a
// version string ("10.11.6-MariaDB-1" is 10, 11, 6); MariaDB behind a
// replication prefix ("5.5.5-10.11.6-MariaDB") answers the part after it.
func versionOf(v string) (major, minor, patch int) {
	if rest, ok := strings.CutPrefix(v, "5.5.5-"); ok && strings.Contains(v, "MariaDB") {
		v = rest
	}
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, 0
	}
	major, _ = strconv.Atoi(parts[0])
	minor = leadingNumber(parts[1])
	if len(parts) == 3 {
		patch = leadingNumber(parts[2])
	}
	return major, minor, patch
}

// leadingNumber is the number the digits at the front of s make.
func leadingNumber(s string) int {
	digits := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if digits < 0 {
		digits = len(s)
	}
	n, _ := strconv.Atoi(s[:digits])
	return n
}

// Server answers what Probe read, nil before it (and but on MySQL).
func (d *Dialect) Server() *Server { return d.server.Load() }

// Returns says INSERT and DELETE return rows (RETURNING): SQLite,
// Postgres, and a server Probe found to be MariaDB; not MySQL 8, nor a
// server not probed yet.
func (d *Dialect) Returns() bool {
	if d.Kind != MySQL {
		return true
	}
	s := d.server.Load()
	return s != nil && s.MariaDB
}

// ConsecutiveIDs answers the step between the generated ids of one
// multi-row INSERT where they are consecutive (innodb_autoinc_lock_mode 0
// or 1), and false where they may not be (mode 2, or a server not probed):
// there each row is its own INSERT. MySQL only.
func (d *Dialect) ConsecutiveIDs() (step int64, ok bool) {
	s := d.server.Load()
	if s == nil || s.AutoincLockMode > 1 {
		return 0, false
	}
	return s.Increment, true
}
