package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/migrations"
)

func init() { builders = append(builders, addOperatorCommands) }

// addOperatorCommands adds the commands of "Operating a queue".
func addOperatorCommands(root *cobra.Command) {
	root.AddGroup(&cobra.Group{ID: "operate", Title: "Operating a queue:"})
	add := func(c *cobra.Command) { c.GroupID = "operate"; root.AddCommand(c) }
	add(queuesCommand())
	add(limitsCommand())
	add(rowsCommand())
	add(rowCommand())
	add(statsCommand())
	for _, c := range changeCommands() {
		add(c)
	}
	add(cancelCommand())
	for _, pause := range []bool{true, false} {
		add(pauseCommand(pause))
	}
	add(instancesCommand())
	add(migrateRegistryCommand())
}

func queuesCommand() *cobra.Command {
	var table, group string
	cmd, _ := operatorCommand("queues", "every registered queue: rows by state, oldest available, instances, paused",
		`Lists every queue a registered service subscribes to (or that is paused), with its rows
by state: available (claimable now), held (due after a sixth of a lease and within it:
in work), delayed (due sooner, or further off: a retry's backoff, a delayed publish), waiting
(for their parents: inbox.After) and parked (failed their last attempt), the age of the
oldest available row, the instances subscribed and their workers, and whether it is paused ("yes (table)": by a pause of the whole table).
Counts read at most the first 100000 rows of a queue in id order ("+" marks a count
that stopped there). Below, the limits per key: each one's key column and n, and per key
value with slots held the rows in work and the rows waiting, as limits prints them (with
--json, each queue's "limits": those its table's rows take slots of).`, onDatabase, func(ctx context.Context, s *opSession) error {
			qs, err := s.op.Queues(ctx)
			if table != "" {
				qs = slices.DeleteFunc(qs, func(q inbox.QueueInfo) bool { return q.Table != table || group != "" && q.Group != group })
				if len(qs) == 0 { // not registered: read as rows reads it
					if err := s.resolve(ctx, table, group); err != nil {
						return err
					}
					q := inbox.QueueInfo{QueueRef: s.ref}
					q.State, q.StateErr = s.op.State(ctx, q.QueueRef)
					qs = []inbox.QueueInfo{q}
				}
			} else if err != nil {
				return err
			}
			// The limits' slots: the rows of a full key wait, counted
			// available in the queue's counts.
			ls, lerr := s.op.Limits(ctx)
			if lerr != nil && s.flags.json {
				return lerr
			}
			return s.emit(queuesJSON(qs, ls), func(w io.Writer) {
				fmt.Fprintln(w, "TABLE\tGROUP\tAVAILABLE\tHELD\tDELAYED\tWAITING\tPARKED\tOLDEST\tINSTANCES\tPOLLED\tWORKERS\tPAUSED")
				for _, q := range qs {
					paused := yes(q.Paused)
					if q.TablePaused {
						paused = "yes (table)"
					}
					if q.StateErr != nil {
						fmt.Fprintf(w, "%s\t%s\t(%v)\t\t\t\t\t\t%d\t%d\t%d\t%s\n", q.Table, dash(q.Group), q.StateErr, q.Instances, q.Polled, q.Workers, paused)
						continue
					}
					c, st := "", q.State
					if st.Capped {
						c = "+"
					}
					fmt.Fprintf(w, "%s\t%s\t%d%s\t%d%s\t%d%s\t%d%s\t%d%s\t%s\t%d\t%d\t%d\t%s\n", q.Table, dash(q.Group), st.Available, c, st.Held, c, st.Delayed, c,
						st.Waiting, c, st.Parked, c, age(st.Oldest), q.Instances, q.Polled, q.Workers, paused)
				}
				if lerr != nil {
					fmt.Fprintf(w, "\n(limits: %v)\n", lerr)
				} else if len(ls) > 0 {
					fmt.Fprintln(w)
					printLimits(w, ls)
				}
			})
		})
	cmd.Flags().StringVar(&table, "table", "", "show only this table's queues; a table not registered is read as rows reads it")
	cmd.Flags().StringVar(&group, "group", "", "with --table: only this group")
	return cmd
}

func rowsCommand() *cobra.Command {
	var states []string
	var limit int
	var wide bool
	var rf inbox.RowFilter
	var from, before string
	cmd, _ := operatorCommand("rows", "a queue's rows with state, attempts, due time, last error and payload preview",
		"Lists a queue's rows in id order. The last error and the payload are cut to 40 characters\nunless --wide; `inbox row --id N` shows one row whole. --state done lists the rows acked\nand kept in the table's history (inbox.History), the most recently handled first, with\nwhen, by which instance and how long; --key, --handled-from and --handled-before search them.", onRows,
		func(ctx context.Context, s *opSession) error {
			rf.States, rf.Limit = splitStates(states), limit
			var err error
			if rf.HandledFrom, err = flagTime("--handled-from", from); err != nil {
				return err
			}
			if rf.HandledBefore, err = flagTime("--handled-before", before); err != nil {
				return err
			}
			rs, err := s.op.Rows(ctx, s.ref, rf)
			if err != nil {
				return err
			}
			cut := 40
			if wide {
				cut = 0
			}
			return s.emit(rowsJSON(rs), func(w io.Writer) {
				if slices.Contains(rf.States, inbox.StateDone) {
					fmt.Fprintln(w, "ID\tATTEMPTS\tHANDLED\tBY\tTOOK\tLAST ERROR\tPAYLOAD")
					for _, r := range rs {
						fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Attempts, when(r.Handled), r.HandledBy, r.Took, preview([]byte(r.LastError), cut), preview(r.Payload, cut))
					}
					return
				}
				fmt.Fprintln(w, "ID\tSTATE\tATTEMPTS\tDUE\tLAST ERROR\tPAYLOAD")
				for _, r := range rs {
					fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\t%s\n", r.ID, r.State, r.Attempts, due(r), preview([]byte(r.LastError), cut), preview(r.Payload, cut))
				}
			})
		})
	cmd.Flags().StringSliceVar(&states, "state", nil, "only rows in these states: available, held, delayed, waiting, parked (repeatable, or comma-separated); or done, alone")
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many rows, in id order (done rows: the most recently handled)")
	cmd.Flags().BoolVar(&wide, "wide", false, "print the last error and the payload whole")
	cmd.Flags().StringVar(&rf.ErrorContains, "error-contains", "", "rows whose last error contains this text")
	cmd.Flags().StringVar(&rf.Key, "key", "", "done rows of this key (the table's key column)")
	cmd.Flags().StringVar(&from, "handled-from", "", "done rows handled at or after this time (RFC 3339)")
	cmd.Flags().StringVar(&before, "handled-before", "", "done rows handled before this time (RFC 3339)")
	return cmd
}

// flagTime reads an RFC 3339 time flag; "" is the zero time.
func flagTime(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %q: want an RFC 3339 time such as 2026-12-05T06:00:00Z: %w", name, v, err)
	}
	return t, nil
}

func rowCommand() *cobra.Command {
	var id int64
	cmd, _ := operatorCommand("row", "one row whole: state, attempts, due time, created, last error and payload", "", onRows,
		func(ctx context.Context, s *opSession) error {
			rs, err := s.op.Rows(ctx, s.ref, inbox.RowFilter{IDs: []int64{id}, Limit: 1})
			if err != nil {
				return err
			}
			if len(rs) == 0 {
				return fmt.Errorf("%s has no row %d", queueName(s.ref), id)
			}
			r := rs[0]
			return s.emit(toRowJSON(r), func(w io.Writer) {
				fmt.Fprintf(w, "id:\t%d\n", r.ID)
				fmt.Fprintf(w, "state:\t%s\n", r.State)
				fmt.Fprintf(w, "attempts:\t%d\n", r.Attempts)
				fmt.Fprintf(w, "due:\t%s\n", due(r))
				fmt.Fprintf(w, "created:\t%s\n", when(r.Created))
				fmt.Fprintf(w, "last error:\t%s\n", block(dash(r.LastError)))
				payload := string(r.Payload)
				if !utf8.Valid(r.Payload) {
					payload = fmt.Sprintf("(%d bytes, base64) %s", len(r.Payload), base64.StdEncoding.EncodeToString(r.Payload))
				}
				fmt.Fprintf(w, "payload:\t%s\n", block(payload))
			})
		})
	cmd.Flags().Int64Var(&id, "id", 0, "the row's id (required)")
	_ = cmd.MarkFlagRequired("id")
	return cmd
}

// block puts a value of several lines under its label, indented.
func block(s string) string {
	if !strings.Contains(s, "\n") {
		return s
	}
	return "\n  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

func statsCommand() *cobra.Command {
	cmd, _ := operatorCommand("stats", "count one queue's rows by state: available, held, delayed, waiting, parked",
		"Counts one queue's rows by state, as queues does for every registered queue, for any table.", onRows,
		func(ctx context.Context, s *opSession) error {
			st, err := s.op.State(ctx, s.ref)
			if err != nil {
				return err
			}
			j := statsJSON{Table: s.ref.Table, Group: s.ref.Group, Available: st.Available, Held: st.Held, Delayed: st.Delayed,
				Waiting: st.Waiting, Parked: st.Parked, Capped: st.Capped, OldestAgeSeconds: ageSeconds(st.Oldest)}
			return s.emit(j, func(w io.Writer) {
				c := ""
				if st.Capped {
					c = "+"
				}
				fmt.Fprintln(w, "TABLE\tGROUP\tAVAILABLE\tHELD\tDELAYED\tWAITING\tPARKED\tOLDEST")
				fmt.Fprintf(w, "%s\t%s\t%d%s\t%d%s\t%d%s\t%d%s\t%d%s\t%s\n", s.ref.Table, dash(s.ref.Group), st.Available, c, st.Held, c, st.Delayed, c, st.Waiting, c, st.Parked, c, age(st.Oldest))
			})
		})
	return cmd
}

func changeCommands() []*cobra.Command {
	var out []*cobra.Command
	for _, c := range []struct {
		use, short, done string
		do               func(*inbox.Operator) func(context.Context, inbox.QueueRef, inbox.Selection) (int64, error)
	}{
		{"unpark", "make parked rows available again, attempts reset", "unparked", func(o *inbox.Operator) func(context.Context, inbox.QueueRef, inbox.Selection) (int64, error) {
			return o.Unpark
		}},
		{"run-now", "make delayed rows due now (held rows, due after a sixth of a lease and within it, are left: they may be in work)", "made due", func(o *inbox.Operator) func(context.Context, inbox.QueueRef, inbox.Selection) (int64, error) {
			return o.RunNow
		}},
		{"delete", "delete available, delayed, waiting or parked rows (held rows, perhaps in work, are left)", "deleted", func(o *inbox.Operator) func(context.Context, inbox.QueueRef, inbox.Selection) (int64, error) {
			return o.Delete
		}},
	} {
		var sel inbox.Selection
		cmd, _ := operatorCommand(c.use, c.short, c.short+".\nSelect rows by --id (repeatable), or --all, or --error-contains; --all and --error-contains combine.", onRows,
			func(ctx context.Context, s *opSession) error {
				n, err := c.do(s.op)(ctx, s.ref, sel)
				if err != nil {
					return err
				}
				return s.emit(changeJSON{Table: s.ref.Table, Group: s.ref.Group, Action: c.use, Changed: n}, func(w io.Writer) {
					fmt.Fprintf(w, "%s %d rows of %s\n", c.done, n, queueName(s.ref))
				})
			})
		cmd.Flags().Int64SliceVar(&sel.IDs, "id", nil, "a row's id (repeatable, or comma-separated)")
		cmd.Flags().BoolVar(&sel.All, "all", false, "every row in the state the command acts on")
		cmd.Flags().StringVar(&sel.ErrorContains, "error-contains", "", "rows whose last error contains this text")
		cmd.MarkFlagsOneRequired("id", "all", "error-contains")
		cmd.MarkFlagsMutuallyExclusive("id", "all")
		out = append(out, cmd)
	}
	return out
}

func pauseCommand(pause bool) *cobra.Command {
	use, short, done := "resume", "let a paused queue be claimed again", "resumed"
	if pause {
		use, short, done = "pause", "stop every registered instance claiming a queue (running handlers finish); new instances start paused", "paused"
	}
	cmd, _ := operatorCommand(use, short, short+`.
Registered instances see it within a heartbeat, and at once on Postgres when their broker
has ListenNotify. A pause of a whole table (no --group) stops every subscription of it; a
pause of one group stops the subscriptions of that group.`, onTable,
		func(ctx context.Context, s *opSession) error {
			table, group := s.flags.table, s.flags.group
			ref := inbox.QueueRef{Table: table, Group: group}
			if pause {
				if _, err := s.existing(ctx, table); err != nil {
					return err
				}
				if err := s.op.Pause(ctx, table, group); err != nil {
					return err
				}
				if reads, err := s.read(ctx, table, group); err == nil && !reads {
					fmt.Fprintf(s.errOut, "warning: no registered subscription reads %s%s; the pause stops the ones that start\n", queueName(ref), s.subscribedGroups(ctx, table))
				}
			} else {
				paused, err := s.op.Paused(ctx)
				if err != nil {
					return err
				}
				if !slices.Contains(paused, [2]string{table, group}) {
					if _, err := s.existing(ctx, table); err != nil {
						return err
					}
					fmt.Fprintf(s.errOut, "warning: %s was not paused\n", queueName(ref))
				}
				if err := s.op.Resume(ctx, table, group); err != nil {
					return err
				}
				if group != "" && slices.Contains(paused, [2]string{table, ""}) {
					fmt.Fprintf(s.errOut, "warning: the whole table %s stays paused: resume it without --group\n", table)
				}
			}
			return s.emit(pauseJSON{Table: table, Group: group, Paused: pause}, func(w io.Writer) {
				fmt.Fprintf(w, "%s %s\n", done, queueName(ref))
			})
		})
	return cmd
}

func instancesCommand() *cobra.Command {
	cmd, _ := operatorCommand("instances", "registered service instances: alive or gone, since when, subscriptions and workers",
		"Lists every instance in the registry. An instance is gone once its heartbeat is three\nintervals old, and at least 5 s (it died without leaving); gone ones are forgotten after a day.", onDatabase,
		func(ctx context.Context, s *opSession) error {
			is, err := s.op.Instances(ctx)
			if err != nil {
				return err
			}
			return s.emit(instancesJSON(is), func(w io.Writer) {
				fmt.Fprintln(w, "INSTANCE\tSERVICE\tVERSION\tHOST\tPID\tSTATUS\tSTARTED\tHEARTBEAT\tPOLL FALLBACK\tSUBSCRIPTIONS")
				for _, in := range is {
					status := "alive"
					if !in.Alive {
						status = "gone"
					}
					var subs []string
					for _, sub := range in.Subscriptions {
						subs = append(subs, fmt.Sprintf("%s (%s, %d workers)", queueName(inbox.QueueRef{Table: sub.Table, Group: sub.Group}), sub.Form, sub.Workers))
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s ago\t%s ago\t%s\t%s\n", in.ID, in.Service, in.Version, in.Host, in.PID, status,
						ago(in.Started), ago(in.Heartbeat), yes(in.PickupFallback != ""), strings.Join(subs, "; "))
				}
			})
		})
	return cmd
}

func migrateRegistryCommand() *cobra.Command {
	cmd, f := operatorCommand("migrate-registry", "create the registry's tables (instances, subscriptions, per-minute counts, paused queues, cancel requests)",
		"Creates the tables registered services record themselves in (migrations.ApplyRegistry),\nand a SQLite database file that does not exist yet; adds to tables an earlier version\nmade the columns later ones record (pickup_fallback, limit_spec). Idempotent.", onDatabase,
		func(ctx context.Context, s *opSession) error {
			if err := migrations.ApplyRegistry(ctx, s.b.DB()); err != nil {
				return err
			}
			return s.emit(registryJSON{Dialect: s.b.Dialect(), Registry: true}, func(w io.Writer) {
				fmt.Fprintf(w, "the registry's tables are in place on %s\n", s.b.Dialect())
			})
		})
	f.create = true
	return cmd
}

func queueName(r inbox.QueueRef) string {
	if r.Group == "" {
		return r.Table
	}
	return r.Table + "/" + r.Group
}

func splitStates(s []string) []string {
	var out []string
	for _, x := range s {
		out = append(out, strings.TrimSpace(x))
	}
	return out
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func ago(t time.Time) string { return time.Since(t).Round(time.Second).String() }

func age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return ago(t)
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

// due is when a row is due, or "-" when it is due now or parked.
func due(r inbox.Row) string {
	if r.LockedUntil.IsZero() || r.State == inbox.StateParked {
		return "-"
	}
	return when(r.LockedUntil)
}

// preview is the first n characters of b as text (all of it when n is 0),
// or its size when binary.
func preview(b []byte, n int) string {
	if !utf8.Valid(b) {
		return fmt.Sprintf("(%d bytes)", len(b))
	}
	s := strings.Join(strings.Fields(string(b)), " ")
	if n > 0 && utf8.RuneCountInString(s) > n {
		s = strings.TrimRight(string([]rune(s)[:n]), " ") + "…"
	}
	if s == "" {
		return "-"
	}
	return s
}
