package engine

import (
	"os/exec"
	"strings"
	"testing"
)

// The engine reads form traits and asks its subscription about errors: no
// database driver is among its imports, however indirect, so a third
// database is one more dialect and driver facts stay beside the driver.
func TestEngineImportsNoDriver(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the engine's imports")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, p := range deps {
		for _, driver := range []string{"github.com/jackc/pgx", "modernc.org/sqlite", "github.com/go-sql-driver/mysql", "/internal/dialect"} {
			if strings.Contains(p, driver) {
				t.Errorf("the engine imports %s: driver facts belong in internal/dialect, reached through Callbacks or a form's Traits", p)
			}
		}
	}
	if len(deps) < 2 || deps[len(deps)-1] != "github.com/sqlinbox/sqlinbox/internal/engine" {
		t.Fatalf("go list -deps gave %d packages, the last %q: not the engine's imports", len(deps), deps[len(deps)-1])
	}
}
