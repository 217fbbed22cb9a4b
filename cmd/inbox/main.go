// Command inbox is sqlinbox's command line: migrate a table, look at a
// queue, measure it, soak it.
//
//	go run ./cmd/inbox migrate --db sqlite://jobs.db --table invoice_jobs
//	go run ./cmd/inbox stats   --db URL --table invoice_jobs
//	go run ./cmd/inbox bench   throughput|latency|idle --db URL ...
//	go run ./cmd/inbox soak    --db URL --form lease ...
//
// URLs are the library's: postgres://..., sqlite:///abs/path.db,
// sqlite://rel/path.db, sqlite://:memory:.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand; each file registers its own in init. A command
// registered without a summary is internal (the soak's worker and producer
// processes) and left out of the usage.
type command struct {
	summary string
	run     func(ctx context.Context, args []string) error
}

var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, args []string) error) {
	commands[name] = command{summary: summary, run: run}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: inbox <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n, c := range commands {
		if c.summary != "" { // commands without a summary are internal
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", n, commands[n].summary)
	}
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "inbox: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cmd.run(ctx, os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "inbox "+os.Args[1]+":", err)
		os.Exit(1)
	}
}
