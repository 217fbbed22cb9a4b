// Command inbox is sqlinbox's command line: migrate a table, operate a
// queue (see what waits, unpark, run now, delete, cancel, pause, resume, who
// runs it), measure it, soak it.
//
//	go run ./cmd/inbox migrate   --db sqlite://jobs.db --table invoice_jobs
//	go run ./cmd/inbox queues    --db URL
//	go run ./cmd/inbox rows      --db URL --table invoice_jobs --state parked
//	go run ./cmd/inbox row       --db URL --table invoice_jobs --id 13
//	go run ./cmd/inbox unpark    --db URL --table invoice_jobs --all
//	go run ./cmd/inbox cancel    --db URL --table invoice_jobs --id 13
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
	"io"
	"os"
	"os/signal"
	"strings"
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
// (bench, soak): its arguments reach run untouched, and run parses them
// with parseFlags, which prints --help as cobra does. A command registered
// without a summary is internal (the soak's and the bench's child
// processes) and hidden.
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
			err := run(context.WithValue(cmd.Context(), commandKey{}, cmd), args)
			if errors.Is(err, flag.ErrHelp) {
				return nil // parseFlags printed the help
			}
			return err
		},
	}
}

// commandKey carries a flag-package command's cobra command to parseFlags.
type commandKey struct{}

// parseFlags parses args into fs; on --help it prints the help of the
// command fs belongs to the way cobra prints every other command's, with
// fs's flags, and returns flag.ErrHelp.
func parseFlags(ctx context.Context, fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard) // a parse error is returned, and main prints it once
	err := fs.Parse(args)
	if !errors.Is(err, flag.ErrHelp) {
		return err
	}
	parent, _ := ctx.Value(commandKey{}).(*cobra.Command)
	help := &cobra.Command{Use: fs.Name() + " [flags]", Run: func(*cobra.Command, []string) {}}
	out := io.Writer(os.Stdout)
	if parent != nil {
		help.Short, help.Long = parent.Short, parent.Long
		out = parent.OutOrStdout()
	}
	(&cobra.Command{Use: "inbox"}).AddCommand(help)
	help.Flags().AddGoFlagSet(fs)
	help.InitDefaultHelpFlag()
	var b strings.Builder
	help.SetOut(&b)
	_ = help.Help()
	fmt.Fprintln(out, strings.TrimRight(b.String(), "\n"))
	return err
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
