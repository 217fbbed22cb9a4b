package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// demoConfig is what --demo takes from the command line.
type demoConfig struct {
	DB        string // empty: a fresh SQLite file in a temporary directory
	PackEvery time.Duration
	Workers   int
	Orders    int
}

// demoServers are the names of the two servers the demo starts.
var demoServers = []string{"shop-a", "shop-b"}

// runDemo starts two servers as two processes of this program on one
// database, prints their output merged (each line prefixed with its
// server), fires both scenarios at them in turn, waits until pack_orders
// packed every paid order, and stops both with SIGTERM.
func runDemo(ctx context.Context, cfg demoConfig) error {
	url := cfg.DB
	if url == "" {
		dir, err := os.MkdirTemp("", "shop-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		url = "sqlite://" + filepath.Join(dir, "shop.db")
	}
	if strings.Contains(url, ":memory:") {
		return fmt.Errorf("shop --demo: %s is a memory database, which two processes cannot share; give a SQLite file (sqlite://shop.db) or Postgres", url)
	}
	db, err := inbox.OpenDB(url)
	if err != nil {
		return err
	}
	defer db.Close()
	for _, apply := range []func(context.Context, *sql.DB) error{migrations.ApplyLocks, migrations.ApplySchedules, applyShop} {
		if err := apply(ctx, db); err != nil {
			return err
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	out := &prefixer{w: os.Stdout}
	var servers []*server
	defer func() {
		for _, s := range servers {
			s.cmd.Process.Kill() // after a clean stop: a no-op
			<-s.done
		}
	}()
	for _, name := range demoServers {
		s, err := startServer(exe, name, url, cfg, out)
		if err != nil {
			return err
		}
		servers = append(servers, s)
	}
	var bases []string
	for _, s := range servers {
		select {
		case base := <-s.listening:
			bases = append(bases, base)
		case <-time.After(30 * time.Second):
			return fmt.Errorf("shop --demo: %s did not start listening within 30s", s.name)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	out.println("demo", fmt.Sprintf("two servers, two processes, one database (%s); calls alternate between them", url))
	fireAll(out, bases)
	out.println("demo", fmt.Sprintf("pack orders: %d orders, every fifth unpaid; pack_orders every %v, %d runs per server", cfg.Orders, cfg.PackEvery, cfg.Workers))
	if err := seedOrders(ctx, db, statementsFor(url), 1, cfg.Orders); err != nil {
		return err
	}
	summary, err := awaitPacked(ctx, db, demoServers, 3*cfg.PackEvery+30*time.Second)
	if err != nil {
		return err
	}
	out.println("demo", summary)
	var errs []error
	for _, s := range servers {
		if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range servers {
		<-s.done
		if err := s.exit; err != nil {
			errs = append(errs, fmt.Errorf("shop --demo: %s after SIGTERM: %w", s.name, err))
		}
	}
	return errors.Join(errs...)
}

// server is one server process of the demo.
type server struct {
	name      string
	cmd       *exec.Cmd
	listening chan string   // its base URL, once it listens
	done      chan struct{} // it exited and its output is read to the end
	exit      error         // how it exited, once done is closed
}

// startServer starts this program as server name, on any free port, and
// copies its output to out, prefixed with its name.
func startServer(exe, name, url string, cfg demoConfig, out *prefixer) (*server, error) {
	cmd := exec.Command(exe, "--name", name, "--addr", "127.0.0.1:0", "--db", url,
		"--pack-every", cfg.PackEvery.String(), "--pack-workers", strconv.Itoa(cfg.Workers), "--orders", "0")
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("shop --demo: start %s: %w", name, err)
	}
	s := &server{name: name, cmd: cmd, listening: make(chan string, 1), done: make(chan struct{})}
	exited := make(chan error, 1)
	go func() {
		exited <- cmd.Wait()
		w.Close()
	}()
	go func() {
		defer close(s.done)
		defer func() { s.exit = <-exited }()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			line := sc.Text()
			out.println(name, line)
			if _, rest, ok := strings.Cut(line, " listening on "); ok {
				base, _, _ := strings.Cut(rest, " ")
				select {
				case s.listening <- base:
				default:
				}
			}
		}
	}()
	return s, nil
}

// prefixer writes whole lines from several sources, each prefixed with its
// source, never interleaved.
type prefixer struct {
	mu sync.Mutex
	w  io.Writer
}

func (p *prefixer) println(source, line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "%-8s %s\n", "["+source+"]", line)
}

// fireAll fires both scenarios, call i at server i modulo 2, and prints
// each answer as it comes.
func fireAll(out *prefixer, bases []string) {
	fire := func(title, path string, n int) {
		out.println("demo", title)
		start := time.Now()
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, body, inst, err := post(bases[i%len(bases)] + path)
				if err != nil {
					out.println("demo", fmt.Sprintf("  %6v  error: %v", time.Since(start).Round(time.Millisecond), err))
					return
				}
				out.println("demo", fmt.Sprintf("  %6v  %d from %s: %s", time.Since(start).Round(time.Millisecond), code, inst, body))
			}()
		}
		wg.Wait()
	}
	fire("send invoice: three calls at once for order 1001", "/orders/1001/invoice", 3)
	fire("send invoice: one more call for order 1001, once it was sent", "/orders/1001/invoice", 1)
	fire("charge payment: six calls at once, the payment service takes three", "/orders/1002/charge", 6)
	fire("a call with an order id that is not a number", "/orders/abc/invoice", 1)
}

func post(u string) (int, string, string, error) {
	resp, err := http.Post(u, "text/plain", nil)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", "", err
	}
	return resp.StatusCode, strings.TrimSpace(string(b)), resp.Header.Get("X-Instance"), nil
}
