//go:build !containers

package testdb

import "testing"

// containerURL is empty without the containers build tag: no Docker needed.
func containerURL(testing.TB) string { return "" }
