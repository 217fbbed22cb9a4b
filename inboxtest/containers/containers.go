// Package containers starts Postgres in Docker for inboxtest: import it in a
// test file, and inboxtest.Postgres(t) in a test binary run without
// POSTGRES_TEST_URL takes its schema on one postgres:15-alpine container,
// started by the first test that asks and removed by testcontainers' reaper
// when the binary exits.
//
//	import _ "github.com/sqlinbox/sqlinbox/inboxtest/containers"
//
// It is a module of its own (testcontainers brings some forty modules with
// it), so only the tests that import it pay for them; inboxtest alone adds
// none. A test binary that imports it needs a Docker engine when
// POSTGRES_TEST_URL is unset: without one its Postgres tests fail, saying
// so.
package containers

import (
	"context"
	"sync"
	"testing"
	"time"

	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/sqlinbox/sqlinbox/internal/testdb"
)

func init() { testdb.Container = url }

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
