package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/sqlinbox/sqlinbox/inbox"
)

func limitsCommand() *cobra.Command {
	cmd, _ := operatorCommand("limits", "every limit per key: its n, and per key value the rows in work and the rows waiting",
		`Lists the limits per key (inbox.Limit, inbox.SharedLimit): each limit's key column and n, as
registered services record them, and the key values with slots held, read from
sqlinbox_limit_slots, the busiest first (at most 1000 key values a limit): the slots held
(rows of the key value in work), the rows waiting (available rows of a key value whose
slots are all held: claims pass over them until a slot frees; counted over at most the
first 100000 rows of a queue, a "+" marking a count that stopped there) and how many of
the slots are past their hold's end (a holder that died: they count until the next
claim's sweep frees them). A limit no registered service records shows "-" for its
column and n, and no rows waiting. queues prints the same section.`, onDatabase,
		func(ctx context.Context, s *opSession) error {
			ls, err := s.op.Limits(ctx)
			if err != nil {
				return err
			}
			return s.emit(limitsJSON(ls), func(w io.Writer) { printLimits(w, ls) })
		})
	return cmd
}

// printLimits writes the limits' table, or a line saying there is none: a
// row per key value with slots held, and one for a limit with none.
func printLimits(w io.Writer, ls []inbox.LimitUse) {
	if len(ls) == 0 {
		fmt.Fprintln(w, "no limit recorded or held")
		return
	}
	fmt.Fprintln(w, "LIMIT\tCOLUMN\tN\tKEY\tHELD\tWAITING\tEXPIRED")
	for _, l := range ls {
		col, n, c := dash(l.Column), "-", ""
		if l.N > 0 {
			n = strconv.Itoa(l.N)
		}
		if l.Per > 0 {
			n += "/" + l.Per.String() // a rate's: starts per window
		}
		if l.WaitingCapped {
			c = "+"
		}
		if len(l.Keys) == 0 {
			fmt.Fprintf(w, "%s\t%s\t%s\t-\t0\t0\t0\n", l.Name, col, n)
		}
		for _, k := range l.Keys {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d%s\t%d\n", l.Name, col, n, k.Key, k.Held, k.Waiting, c, k.Expired)
		}
	}
}

// limitJSON is one limit (limits).
type limitJSON struct {
	Name          string       `json:"name"`
	Column        *string      `json:"column"`
	N             *int         `json:"n"`
	Per           string       `json:"per,omitempty"` // a rate's window (inbox.Rate)
	Tables        []string     `json:"tables"`
	WaitingCapped bool         `json:"waiting_capped"`
	Keys          []limitKeyJS `json:"keys"`
}

type limitKeyJS struct {
	Key     string `json:"key"`
	Held    int    `json:"held"`
	Waiting int64  `json:"waiting"`
	Expired int    `json:"expired"`
}

func limitsJSON(ls []inbox.LimitUse) []limitJSON {
	out := []limitJSON{}
	for _, l := range ls {
		j := limitJSON{Name: l.Name, Tables: l.Tables, WaitingCapped: l.WaitingCapped, Keys: []limitKeyJS{}}
		if j.Tables == nil {
			j.Tables = []string{}
		}
		if l.N > 0 {
			j.Column, j.N = &l.Column, &l.N
		}
		if l.Per > 0 {
			j.Per = l.Per.String()
		}
		for _, k := range l.Keys {
			j.Keys = append(j.Keys, limitKeyJS{Key: k.Key, Held: k.Held, Waiting: k.Waiting, Expired: k.Expired})
		}
		out = append(out, j)
	}
	return out
}
