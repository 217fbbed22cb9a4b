package main

import (
	"bufio"
	"context"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/inboxtest"
)

// With mainEnv set, this test binary is the shop command itself (its
// arguments are the command's), so the tests run it as real processes: the
// demo then starts its servers from the same binary.
const mainEnv = "SHOP_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// command runs the shop command with args, killed if ctx ends first.
func command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	return cmd
}

// eachSharedDatabase runs f on a SQLite file and on a Postgres schema:
// databases that several processes share.
func eachSharedDatabase(t *testing.T, f func(t *testing.T, dbURL string)) {
	t.Run("sqlite-file", func(t *testing.T) { f(t, "sqlite://"+filepath.Join(t.TempDir(), "shop.db")) })
	t.Run("postgres", func(t *testing.T) { f(t, inboxtest.Postgres(t)) })
}

// heartbeats counts the schedule heartbeats of instance name.
func heartbeats(t *testing.T, dbURL, name string) int {
	t.Helper()
	db, err := inbox.OpenDB(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	q := "SELECT count(*) FROM sqlinbox_schedule_heartbeats WHERE instance = $1"
	if !IsPostgres(dbURL) {
		q = dollar.ReplaceAllString(q, "?$1")
	}
	if err := db.QueryRow(q, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The demo runs two server processes on one database and merges their
// output: the invoice is sent once across both, a later call is told it was
// already sent, six charges pass three at a time across the processes,
// a bad id is refused, every paid order is packed with runs on both
// servers, and both stop cleanly on SIGTERM, leaving no heartbeat.
func TestDemoTwoProcesses(t *testing.T) {
	eachSharedDatabase(t, func(t *testing.T, dbURL string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := command(ctx, "--demo", "--db", dbURL, "--pack-every", "1s", "--orders", "20")
		out, err := cmd.CombinedOutput()
		if err != nil || ctx.Err() != nil {
			t.Fatalf("demo: %v\n%s", err, out)
		}
		text := string(out)
		t.Logf("demo output:\n%s", text)
		count := func(s string) int { return strings.Count(text, s) }
		for _, want := range []struct {
			s string
			n int
		}{
			{"[shop-a] shop: shop-a listening on", 1},
			{"[shop-b] shop: shop-b listening on", 1},
			{"invoice sent by", 1},
			{"409 from", 2},
			{"invoice already sent by", 1},
			{"charged by", 6},
			{`400 from shop-a: order id "abc" is not an order number`, 1},
			{"[demo]   pack_orders: all 16 paid orders packed", 1},
			{"[shop-a] shop: shop-a stopped: pack_orders left, its heartbeats deleted", 1},
			{"[shop-b] shop: shop-b stopped: pack_orders left, its heartbeats deleted", 1},
		} {
			if got := count(want.s); got != want.n {
				t.Errorf("%q %d times in the output, want %d", want.s, got, want.n)
			}
		}
		if count("charged by shop-a") == 0 || count("charged by shop-b") == 0 {
			t.Errorf("charges were not served by both processes")
		}
		if count("[shop-a] pack_orders at") == 0 || count("[shop-b] pack_orders at") == 0 {
			t.Errorf("pack_orders did not run in both processes")
		}
		for _, name := range demoServers {
			if n := heartbeats(t, dbURL, name); n != 0 {
				t.Errorf("%d heartbeats of %s left after the demo", n, name)
			}
		}
	})
}

// A server stops on SIGTERM as on Ctrl-C: its schedule leaves (no heartbeat
// left behind) and it exits 0.
func TestServerStopsOnSIGTERM(t *testing.T) {
	eachSharedDatabase(t, func(t *testing.T, dbURL string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := command(ctx, "--name", "shop-term", "--addr", "127.0.0.1:0", "--db", dbURL, "--orders", "0")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		lines := bufio.NewScanner(stdout)
		for !strings.Contains(lines.Text(), "listening on") {
			if !lines.Scan() {
				t.Fatalf("the server ended before listening: %v", lines.Err())
			}
		}
		if n := heartbeats(t, dbURL, "shop-term"); n != 1 {
			t.Fatalf("%d heartbeats while running, want 1", n)
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		var rest []string
		for lines.Scan() {
			rest = append(rest, lines.Text())
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("after SIGTERM: %v (output %q)", err, rest)
		}
		if !strings.Contains(strings.Join(rest, "\n"), "shop: shop-term stopped") {
			t.Errorf("output after SIGTERM: %q, want the stop reported", rest)
		}
		if n := heartbeats(t, dbURL, "shop-term"); n != 0 {
			t.Fatalf("%d heartbeats left after SIGTERM, want 0", n)
		}
	})
}

// The example uses only the library's public API.
func TestPublicAPIOnly(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range parsed.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); strings.Contains(path, "sqlinbox/internal") {
				t.Errorf("%s imports %s: the example uses the public API only", f, path)
			}
		}
	}
}
