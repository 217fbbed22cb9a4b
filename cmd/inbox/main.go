// Command inbox is sqlinbox's command line: migrate a table, operate a
// queue (see what waits, unpark, run now, delete, pause, resume, who runs
// it), measure it, soak it.
//
//	go run ./cmd/inbox migrate   --db sqlite://jobs.db --table invoice_jobs
//	go run ./cmd/inbox queues    --db URL
//	go run ./cmd/inbox rows      --db URL --table invoice_jobs --state parked
//	go run ./cmd/inbox unpark    --db URL --table invoice_jobs --all
//	go run ./cmd/inbox pause     --db URL --table invoice_jobs
//	go run ./cmd/inbox instances --db URL
//	go run ./cmd/inbox bench     throughput|latency|idle --db URL ...
//	go run ./cmd/inbox soak      --db URL --form lease ...
//	go run ./cmd/inbox completion bash|zsh|fish|powershell
//
// Every command takes --help. URLs are the library's: postgres://...,
// sqlite:///abs/path.db, sqlite://rel/path.db, sqlite://:memory:.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// builders make the root's commands; each file adds its own in init. A
// command line is built fresh for each run (newRoot), so flags never carry
// a value over from an earlier run (tests run several in one process).
var builders []func(root *cobra.Command)

// newRoot builds the command line.
func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "inbox",
		Short:         "sqlinbox's command line: migrate, operate, measure and soak inbox tables",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	for _, b := range builders {
		b(root)
	}
	return root
}

// register adds a command that parses its own flags with the flag package
// (migrate, stats, bench, soak): its arguments reach run untouched, and
// its --help is the flag set's. A command registered without a summary is
// internal (the soak's and the bench's child processes) and hidden.
func register(name, summary string, run func(ctx context.Context, args []string) error) {
	builders = append(builders, func(root *cobra.Command) { root.AddCommand(newFlagCommand(name, summary, run)) })
}

func newFlagCommand(name, summary string, run func(ctx context.Context, args []string) error) *cobra.Command {
	return &cobra.Command{
		Use:                name + " [flags]",
		Short:              summary,
		Hidden:             summary == "",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			err := run(cmd.Context(), args)
			if errors.Is(err, flag.ErrHelp) {
				return nil // the flag set printed its usage
			}
			return err
		},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cmd, err := newRoot().ExecuteContextC(ctx); err != nil {
		fmt.Fprintln(os.Stderr, cmd.CommandPath()+":", err)
		stop()
		os.Exit(1)
	}
}
