package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/sqlinbox/sqlinbox/inbox"
)

func limitsCommand() *cobra.Command {
	cmd, _ := operatorCommand("limits", "the slots held of every limit per key: rows in work per key value",
		`Lists the limits per key (inbox.Limit, inbox.SharedLimit) with slots held, read from
sqlinbox_limit_slots: per limit, the key values with rows in work, the fullest first
(at most 1000 key values), and how many of those slots are past their hold's end
(a holder that died: they count until the next claim's sweep frees them). A key
value whose held slots number its limit's n has its other rows waiting. A database
without the slot table has no limits. queues prints the same section.`, onDatabase,
		func(ctx context.Context, s *opSession) error {
			ls, err := s.op.Limits(ctx)
			if err != nil {
				return err
			}
			return s.emit(limitsJSON(ls), func(w io.Writer) { printLimits(w, ls) })
		})
	return cmd
}

// printLimits writes the limits' table, or a line saying none is held.
func printLimits(w io.Writer, ls []inbox.LimitUse) {
	if len(ls) == 0 {
		fmt.Fprintln(w, "no limit slot held")
		return
	}
	fmt.Fprintln(w, "LIMIT\tKEY\tHELD\tEXPIRED")
	for _, l := range ls {
		for _, k := range l.Keys {
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\n", l.Name, k.Key, k.Held, k.Expired)
		}
	}
}

// limitJSON is one limit with slots held (limits).
type limitJSON struct {
	Name string       `json:"name"`
	Keys []limitKeyJS `json:"keys"`
}

type limitKeyJS struct {
	Key     string `json:"key"`
	Held    int    `json:"held"`
	Expired int    `json:"expired"`
}

func limitsJSON(ls []inbox.LimitUse) []limitJSON {
	out := []limitJSON{}
	for _, l := range ls {
		j := limitJSON{Name: l.Name, Keys: []limitKeyJS{}}
		for _, k := range l.Keys {
			j.Keys = append(j.Keys, limitKeyJS{Key: k.Key, Held: k.Held, Expired: k.Expired})
		}
		out = append(out, j)
	}
	return out
}
