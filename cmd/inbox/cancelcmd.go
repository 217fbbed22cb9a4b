package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sqlinbox/sqlinbox/inbox"
)

// cancelJSON is what cancel did.
type cancelJSON struct {
	Table   string  `json:"table"`
	Group   string  `json:"group"`
	Action  string  `json:"action"`
	Deleted bool    `json:"deleted"` // the rows are deleted, not parked
	Changed int64   `json:"changed"` // rows not in work, parked or deleted now
	InWork  int64   `json:"in_work"` // rows in work: their handlers are told
	Missing []int64 `json:"missing"` // ids with no row
}

func cancelCommand() *cobra.Command {
	var ids []int64
	var opts inbox.CancelOptions
	cmd, _ := operatorCommand("cancel", "cancel rows, in work or not: their handlers' contexts end with inbox.ErrCanceled; the rows are parked (or deleted)",
		`Cancels rows by id. A row in work on a registered instance has its handler's context
end with inbox.ErrCanceled within about a second (at once on Postgres with ListenNotify,
else at the instance's cancel poll, 200ms by default); that instance then parks the row
with the cancel as its last error, or deletes it with --delete, whatever the handler
returns. A row not in work is parked (or deleted) at once; a parked row is left as it is
(deleted with --delete). The request is kept in the registry (migrate-registry) until
the row is parked or deleted.`, onRows,
		func(ctx context.Context, s *opSession) error {
			res, err := s.op.Cancel(ctx, s.ref, ids, opts)
			if err != nil {
				return err
			}
			for _, id := range res.Missing {
				fmt.Fprintf(s.errOut, "warning: %s has no row %d (acked or deleted)\n", queueName(s.ref), id)
			}
			j := cancelJSON{Table: s.ref.Table, Group: s.ref.Group, Action: "cancel", Deleted: opts.Delete, Changed: res.Stopped, InWork: res.InWork, Missing: res.Missing}
			if j.Missing == nil {
				j.Missing = []int64{}
			}
			return s.emit(j, func(w io.Writer) {
				done, verb := "parked", "park"
				if opts.Delete {
					done, verb = "deleted", "delete"
				}
				var parts []string
				parts = append(parts, fmt.Sprintf("%s %d rows of %s not in work", done, res.Stopped, queueName(s.ref)))
				if res.InWork > 0 {
					parts = append(parts, fmt.Sprintf("canceled %d in work (their instances end their handlers and %s them)", res.InWork, verb))
				}
				fmt.Fprintln(w, strings.Join(parts, "; "))
			})
		})
	cmd.Flags().Int64SliceVar(&ids, "id", nil, "a row's id (repeatable, or comma-separated; required)")
	cmd.Flags().BoolVar(&opts.Delete, "delete", false, "delete the rows rather than park them")
	cmd.Flags().StringVar(&opts.Reason, "reason", "", "recorded in each parked row's last error, and given to the handler (inbox.CancelCause)")
	_ = cmd.MarkFlagRequired("id")
	return cmd
}
