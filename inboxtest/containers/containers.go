// Package containers starts Postgres and MariaDB in Docker for inboxtest:
// import it in a test file, and inboxtest.Postgres(t) in a test binary run
// without POSTGRES_TEST_URL takes its schema on one postgres:15-alpine
// container, and inboxtest.MySQL(t) without MYSQL_TEST_URL its database on
// one mariadb:11.4 container, each started by the first test that asks and
// removed by testcontainers' reaper when the binary exits.
//
//	import _ "github.com/sqlinbox/sqlinbox/inboxtest/containers"
//
// It is a module of its own (testcontainers brings some forty modules with
// it), so only the tests that import it pay for them; inboxtest alone adds
// none. A test binary that imports it needs a Docker engine when
// POSTGRES_TEST_URL (or MYSQL_TEST_URL) is unset: without one those tests
// fail, saying so.
package containers

import (
	"context"
	"sync"
	"testing"
	"time"

	tcmariadb "github.com/testcontainers/testcontainers-go/modules/mariadb"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/sqlinbox/sqlinbox/internal/testdb"
)

func init() {
	testdb.Container = url
	testdb.MySQLContainer = mysqlURL
}

// container is the one Postgres of this test binary, started by the first
// test that asks for it and reused by every later one.
var container struct {
	once sync.Once
	url  string
	err  error
}

// url starts (once per test binary) a Postgres testdb.ContainerImage and
// returns its URL.
func url(t testing.TB) string {
	t.Helper()
	container.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		c, err := tcpostgres.Run(ctx, testdb.ContainerImage,
			tcpostgres.WithDatabase("test"),
			tcpostgres.WithUsername("postgres"),
			tcpostgres.WithPassword("postgres"),
			tcpostgres.BasicWaitStrategies(),
		)
		if err != nil {
			container.err = err
			return
		}
		container.url, container.err = c.ConnectionString(ctx, "sslmode=disable")
	})
	if container.err != nil {
		t.Fatalf("inboxtest/containers: start a Postgres container (%s); is a Docker engine running? %v", testdb.ContainerImage, container.err)
	}
	return container.url
}

// mariadb is the one MariaDB of this test binary, as container is its
// Postgres.
var mariadb struct {
	once sync.Once
	url  string
	err  error
}

// mysqlURL starts (once per test binary) a MariaDB
// testdb.MySQLContainerImage and returns its mysql:// URL as root, who may
// create the database of each test.
func mysqlURL(t testing.TB) string {
	t.Helper()
	mariadb.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		c, err := tcmariadb.Run(ctx, testdb.MySQLContainerImage,
			tcmariadb.WithDatabase("test"),
			tcmariadb.WithUsername("root"),
			tcmariadb.WithPassword("test"),
		)
		if err != nil {
			mariadb.err = err
			return
		}
		endpoint, err := c.PortEndpoint(ctx, "3306/tcp", "")
		if err != nil {
			mariadb.err = err
			return
		}
		mariadb.url = "mysql://root:test@" + endpoint + "/test"
	})
	if mariadb.err != nil {
		t.Fatalf("inboxtest/containers: start a MariaDB container (%s); is a Docker engine running? %v", testdb.MySQLContainerImage, mariadb.err)
	}
	return mariadb.url
}
