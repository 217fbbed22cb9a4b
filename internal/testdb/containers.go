//go:build containers

package testdb

import (
	"context"
	"sync"
	"testing"
	"time"

	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// container is the one Postgres of this test binary, started by the first
// test that asks for it and reused by every later one. testcontainers'
// reaper removes it when the binary exits.
var container struct {
	once sync.Once
	url  string
	err  error
}

// containerURL starts (once per test binary) a Postgres ContainerImage with
// testcontainers and returns its URL. It needs a Docker engine: without one
// the test fails, since the containers tag asked for it.
func containerURL(t testing.TB) string {
	t.Helper()
	container.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		c, err := tcpostgres.Run(ctx, ContainerImage,
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
		t.Fatalf("inboxtest: start a Postgres container (%s) for the containers build tag; is a Docker engine running? %v", ContainerImage, container.err)
	}
	return container.url
}
