package dialect_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
	"github.com/sqlinbox/sqlinbox/internal/testdb"
)

// A pool whose sessions are read-only (a standby, a demoted primary) gets
// its write refused as 25006, which the dialect takes for a dead
// connection; the connection is dropped, so the next statement runs on a
// new one, not on the read-only session again.
func TestReadOnlySessionDropped(t *testing.T) {
	u := os.Getenv("POSTGRES_TEST_URL")
	if u == "" {
		t.Skip("POSTGRES_TEST_URL is not set")
	}
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	db, d, err := dialect.Open(u + sep + "options=-c%20default_transaction_read_only%3Don")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	var before, after int
	if err := db.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&before); err != nil {
		t.Fatal(err)
	}
	_, err = db.ExecContext(ctx, "CREATE TEMP TABLE readonly_probe (id int)")
	if err == nil {
		t.Fatal("a write on a read-only session succeeded")
	}
	t.Logf("the write on a read-only session: %v", err)
	if !d.Unreachable(err) || !d.DeadConn(err) {
		t.Fatalf("read-only refusal %v: Unreachable %v, DeadConn %v, want both", err, d.Unreachable(err), d.DeadConn(err))
	}
	if err := db.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&after); err != nil {
		t.Fatalf("the statement after the read-only refusal: %v", err)
	}
	if after == before {
		t.Fatalf("the read-only session (pid %d) stayed in the pool", before)
	}
}

// On MariaDB/MySQL a write refused as read-only (1792 here: the session's
// transactions were made read-only; 1290 when the server runs with
// --read-only) is taken for a dead connection, and the connection is
// dropped from a pool Open made, so the write sent again runs on a new one
// and lands, not on the read-only session again: a statement on the pool,
// one in a transaction, and a prepared one.
func TestReadOnlyMySQLSessionDropped(t *testing.T) {
	u := testdb.MySQL(t)
	for _, via := range []string{"statement", "transaction", "prepared"} {
		t.Run(via, func(t *testing.T) {
			db, d, err := dialect.Open(u)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			ctx := context.Background()
			if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS readonly_probe (id INT)"); err != nil {
				t.Fatal(err)
			}
			var before, after int64
			if err := db.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&before); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, "SET SESSION TRANSACTION READ ONLY"); err != nil {
				t.Fatal(err)
			}
			const write = "INSERT INTO readonly_probe (id) VALUES (?)"
			switch via {
			case "statement":
				_, err = db.ExecContext(ctx, write, 1)
			case "transaction":
				tx, terr := db.BeginTx(ctx, nil)
				if terr != nil {
					t.Fatal(terr)
				}
				_, err = tx.ExecContext(ctx, write, 1)
				_ = tx.Rollback()
			case "prepared":
				// MariaDB refuses it as the statement is prepared.
				var st *sql.Stmt
				if st, err = db.PrepareContext(ctx, write); err == nil {
					_, err = st.ExecContext(ctx, 1)
					st.Close()
				}
			}
			if err == nil {
				t.Fatal("a write on a read-only session succeeded")
			}
			t.Logf("the write on a read-only session: %v", err)
			if !d.Unreachable(err) || !d.DeadConn(err) || d.Refused(err) != nil {
				t.Fatalf("read-only refusal %v: Unreachable %v, DeadConn %v, Refused %v; want a dead connection", err, d.Unreachable(err), d.DeadConn(err), d.Refused(err))
			}
			if err := db.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&after); err != nil {
				t.Fatalf("the statement after the read-only refusal: %v", err)
			}
			if after == before {
				t.Fatalf("the read-only session (connection %d) stayed in the pool", before)
			}
			if _, err := db.ExecContext(ctx, write, 2); err != nil {
				t.Fatalf("the write sent again on a new connection: %v", err)
			}
		})
	}
}

// 1290 is every server option that prevents a statement: only the
// read-only ones are a connection on the wrong server.
func TestMySQLReadOnlyErrors(t *testing.T) {
	d := dialect.Of(dialect.MySQL)
	for _, c := range []struct {
		err  *mysql.MySQLError
		dead bool
	}{
		{&mysql.MySQLError{Number: 1290, Message: "The MariaDB server is running with the --read-only option so it cannot execute this statement"}, true},
		{&mysql.MySQLError{Number: 1290, Message: "The MySQL server is running with the --super-read-only option so it cannot execute this statement"}, true},
		{&mysql.MySQLError{Number: 1792, Message: "Cannot execute statement in a READ ONLY transaction"}, true},
		{&mysql.MySQLError{Number: 1290, Message: "The MariaDB server is running with the --secure-file-priv option so it cannot execute this statement"}, false},
	} {
		err := fmt.Errorf("claim: %w", c.err)
		if d.DeadConn(err) != c.dead || d.Unreachable(err) != c.dead {
			t.Errorf("%v: DeadConn %v, Unreachable %v; want %v", c.err, d.DeadConn(err), d.Unreachable(err), c.dead)
		}
	}
}
