package containers_test

// docs/testing.md, "Postgres in Docker for your tests": the one line a user adds.
import _ "github.com/sqlinbox/sqlinbox/inboxtest/containers"

import (
	"testing"

	"github.com/sqlinbox/sqlinbox/internal/testdb"
)

// Importing the package is all a user does: inboxtest then starts Postgres
// in Docker when POSTGRES_TEST_URL is unset, and MariaDB when
// MYSQL_TEST_URL is.
func TestImportHandsInboxtestTheContainer(t *testing.T) {
	if testdb.Container == nil {
		t.Fatal("importing inboxtest/containers left inboxtest without a Postgres container to start")
	}
	if testdb.MySQLContainer == nil {
		t.Fatal("importing inboxtest/containers left inboxtest without a MariaDB container to start")
	}
}
