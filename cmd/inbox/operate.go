package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/migrations"
)

// opFlags are the flags every operator command takes.
type opFlags struct {
	db    string
	json  bool
	table string
	group string
	roles map[inbox.Role]*string
	lease time.Duration
}

// operatorCommand makes a command that works on a database (--db, --json),
// and with table, on one queue (--table, --group, and the column roles
// for a table no registered service subscribes to).
func operatorCommand(use, short, long string, table bool, run func(ctx context.Context, o *opSession) error) (*cobra.Command, *opFlags) {
	f := &opFlags{roles: map[inbox.Role]*string{}}
	cmd := &cobra.Command{Use: use, Short: short, Long: long, Args: cobra.NoArgs}
	cmd.Flags().StringVar(&f.db, "db", "", "database URL: postgres://... or sqlite:///path.db (required)")
	cmd.Flags().BoolVar(&f.json, "json", false, "print JSON instead of a table")
	_ = cmd.MarkFlagRequired("db")
	if table {
		cmd.Flags().StringVar(&f.table, "table", "", "the queue's table (required)")
		cmd.Flags().StringVar(&f.group, "group", "", "one group of the table (default: the whole table)")
		_ = cmd.MarkFlagRequired("table")
		for _, r := range []inbox.Role{inbox.RoleID, inbox.RoleLockedUntil, inbox.RolePayload, inbox.RoleGroup, inbox.RoleAttempts, inbox.RoleLastError, inbox.RoleCreatedAt} {
			name := strings.ReplaceAll(string(r), "_", "-") + "-column"
			f.roles[r] = cmd.Flags().String(name, "", fmt.Sprintf("the %s column of a table no registered service subscribes to (default: the registry's, else the reference table's %q; \"-\" for none)", r, inbox.ReferenceRoles()[r]))
		}
		cmd.Flags().DurationVar(&f.lease, "lease", 0, "rows due within a lease from now count as held, not delayed (default: the registered subscription's lease, else 30s)")
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		b, err := inbox.Open(f.db, inbox.MaxConns(2))
		if err != nil {
			return err
		}
		defer b.Close()
		s := &opSession{flags: f, b: b, op: inbox.NewOperator(b), out: cmd.OutOrStdout()}
		if table {
			if s.ref, err = s.resolve(cmd.Context(), cmd); err != nil {
				return err
			}
		}
		return run(cmd.Context(), s)
	}
	return cmd, f
}

// opSession is one operator command's run.
type opSession struct {
	flags *opFlags
	b     *inbox.Broker
	op    *inbox.Operator
	out   io.Writer
	ref   inbox.QueueRef
}

// resolve finds the queue's roles: flags first, then the registry, then
// the reference table's.
func (s *opSession) resolve(ctx context.Context, cmd *cobra.Command) (inbox.QueueRef, error) {
	f := s.flags
	ref := inbox.QueueRef{Table: f.table, Group: f.group, Lease: f.lease}
	given := false
	for _, p := range f.roles {
		given = given || *p != ""
	}
	if !given {
		reg, ok, err := s.op.Ref(ctx, f.table, f.group)
		if err == nil && ok {
			if ref.Lease == 0 {
				ref.Lease = reg.Lease
			}
			ref.Roles = reg.Roles
			return ref, nil
		}
	}
	ref.Roles = inbox.ReferenceRoles()
	for r, p := range f.roles {
		switch *p {
		case "":
		case "-":
			delete(ref.Roles, r)
		default:
			ref.Roles[r] = *p
		}
	}
	return ref, nil
}

// emit prints v as JSON with --json, else calls table with a tab writer.
func (s *opSession) emit(v any, table func(w io.Writer)) error {
	if s.flags.json {
		e := json.NewEncoder(s.out)
		e.SetIndent("", "  ")
		return e.Encode(v)
	}
	tw := tabwriter.NewWriter(s.out, 2, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

func init() { builders = append(builders, addOperatorCommands) }

// addOperatorCommands adds the commands of "Operating a queue".
func addOperatorCommands(root *cobra.Command) {
	root.AddGroup(&cobra.Group{ID: "operate", Title: "Operating a queue:"})
	add := func(c *cobra.Command) { c.GroupID = "operate"; root.AddCommand(c) }

	var queuesTable, queuesGroup string
	queues, _ := operatorCommand("queues", "every registered queue: rows by state, oldest available, instances, paused",
		`Lists every queue a registered service subscribes to (or that is paused), with its rows
by state: available (claimable now), held (due within a lease: in work, or due again
soon), delayed (further off: a retry's backoff, a delayed publish) and parked (failed
their last attempt), the age of the oldest available row, the instances subscribed and
their workers, and whether it is paused. Counts read at most the first 100000 rows of
a queue in id order ("+" marks a count that stopped there).`, false, func(ctx context.Context, s *opSession) error {
			var qs []inbox.QueueInfo
			if queuesTable != "" {
				qs = []inbox.QueueInfo{{QueueRef: inbox.QueueRef{Table: queuesTable, Group: queuesGroup, Roles: inbox.ReferenceRoles()}}}
				qs[0].State, qs[0].StateErr = s.op.State(ctx, qs[0].QueueRef)
			} else {
				var err error
				if qs, err = s.op.Queues(ctx); err != nil {
					return err
				}
			}
			return s.emit(queuesJSON(qs), func(w io.Writer) {
				fmt.Fprintln(w, "TABLE\tGROUP\tAVAILABLE\tHELD\tDELAYED\tPARKED\tOLDEST\tINSTANCES\tWORKERS\tPAUSED")
				for _, q := range qs {
					if q.StateErr != nil {
						fmt.Fprintf(w, "%s\t%s\t(%v)\n", q.Table, dash(q.Group), q.StateErr)
						continue
					}
					c, st := "", q.State
					if st.Capped {
						c = "+"
					}
					fmt.Fprintf(w, "%s\t%s\t%d%s\t%d%s\t%d%s\t%d%s\t%s\t%d\t%d\t%s\n", q.Table, dash(q.Group), st.Available, c, st.Held, c, st.Delayed, c,
						st.Parked, c, age(st.Oldest), q.Instances, q.Workers, yes(q.Paused))
				}
			})
		})
	queues.Flags().StringVar(&queuesTable, "table", "", "show only this table, registered or not (with the reference table's columns)")
	queues.Flags().StringVar(&queuesGroup, "group", "", "with --table: only this group")
	add(queues)

	var states []string
	var limit int
	rows, _ := operatorCommand("rows", "a queue's rows with state, attempts, due time, last error and payload preview", "", true,
		func(ctx context.Context, s *opSession) error {
			rs, err := s.op.Rows(ctx, s.ref, inbox.RowFilter{States: splitStates(states), Limit: limit})
			if err != nil {
				return err
			}
			return s.emit(rowsJSON(rs), func(w io.Writer) {
				fmt.Fprintln(w, "ID\tSTATE\tATTEMPTS\tDUE\tLAST ERROR\tPAYLOAD")
				for _, r := range rs {
					due := "-"
					if !r.LockedUntil.IsZero() && r.State != inbox.StateParked {
						due = r.LockedUntil.Local().Format(time.DateTime)
					}
					fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\t%s\n", r.ID, r.State, r.Attempts, due, preview([]byte(r.LastError), 40), preview(r.Payload, 40))
				}
			})
		})
	rows.Flags().StringSliceVar(&states, "state", nil, "only rows in these states: available, held, delayed, parked (repeatable, or comma-separated)")
	rows.Flags().IntVar(&limit, "limit", 100, "at most this many rows, in id order")
	add(rows)

	for _, c := range []struct {
		use, short, done string
		do               func(*inbox.Operator) func(context.Context, inbox.QueueRef, inbox.Selection) (int64, error)
	}{
		{"unpark", "make parked rows available again, attempts reset", "unparked", func(o *inbox.Operator) func(context.Context, inbox.QueueRef, inbox.Selection) (int64, error) {
			return o.Unpark
		}},
		{"run-now", "make delayed rows due now (rows due within a lease are left: they may be in work)", "made due", func(o *inbox.Operator) func(context.Context, inbox.QueueRef, inbox.Selection) (int64, error) {
			return o.RunNow
		}},
		{"delete", "delete available, delayed or parked rows (held rows, perhaps in work, are left)", "deleted", func(o *inbox.Operator) func(context.Context, inbox.QueueRef, inbox.Selection) (int64, error) {
			return o.Delete
		}},
	} {
		var sel inbox.Selection
		cmd, _ := operatorCommand(c.use, c.short, c.short+".\nSelect rows by --id (repeatable), or --all, or --error-contains; --all and --error-contains combine.", true,
			func(ctx context.Context, s *opSession) error {
				n, err := c.do(s.op)(ctx, s.ref, sel)
				if err != nil {
					return err
				}
				return s.emit(map[string]any{"table": s.ref.Table, "group": s.ref.Group, "changed": n}, func(w io.Writer) {
					fmt.Fprintf(w, "%s %d rows of %s\n", c.done, n, queueName(s.ref))
				})
			})
		cmd.Flags().Int64SliceVar(&sel.IDs, "id", nil, "a row's id (repeatable, or comma-separated)")
		cmd.Flags().BoolVar(&sel.All, "all", false, "every row in the state the command acts on")
		cmd.Flags().StringVar(&sel.ErrorContains, "error-contains", "", "rows whose last error contains this text")
		cmd.MarkFlagsOneRequired("id", "all", "error-contains")
		cmd.MarkFlagsMutuallyExclusive("id", "all")
		add(cmd)
	}

	for _, c := range []struct {
		use, short, done string
		pause            bool
	}{
		{"pause", "stop every registered instance claiming a queue (running handlers finish); new instances start paused", "paused", true},
		{"resume", "let a paused queue be claimed again", "resumed", false},
	} {
		cmd, _ := operatorCommand(c.use, c.short, c.short+`.
Registered instances see it within a heartbeat, and at once on Postgres when their broker
has ListenNotify. A pause of a whole table (no --group) stops every subscription of it; a
pause of one group stops the subscriptions of that group.`, true,
			func(ctx context.Context, s *opSession) error {
				do := s.op.Resume
				if c.pause {
					do = s.op.Pause
				}
				if err := do(ctx, s.ref.Table, s.ref.Group); err != nil {
					return err
				}
				return s.emit(map[string]any{"table": s.ref.Table, "group": s.ref.Group, "paused": c.pause}, func(w io.Writer) {
					fmt.Fprintf(w, "%s %s\n", c.done, queueName(s.ref))
				})
			})
		add(cmd)
	}

	instances, _ := operatorCommand("instances", "registered service instances: alive or gone, since when, subscriptions and workers",
		"Lists every instance in the registry. An instance is gone once its heartbeat is three\nintervals old, and at least 5 s (it died without leaving); gone ones are forgotten after a day.", false,
		func(ctx context.Context, s *opSession) error {
			is, err := s.op.Instances(ctx)
			if err != nil {
				return err
			}
			if is == nil {
				is = []inbox.Instance{}
			}
			return s.emit(is, func(w io.Writer) {
				fmt.Fprintln(w, "INSTANCE\tSERVICE\tVERSION\tHOST\tPID\tSTATUS\tSTARTED\tHEARTBEAT\tSUBSCRIPTIONS")
				for _, in := range is {
					status := "alive"
					if !in.Alive {
						status = "gone"
					}
					var subs []string
					for _, sub := range in.Subscriptions {
						subs = append(subs, fmt.Sprintf("%s (%s, %d workers)", queueName(inbox.QueueRef{Table: sub.Table, Group: sub.Group}), sub.Form, sub.Workers))
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s ago\t%s ago\t%s\n", in.ID, in.Service, in.Version, in.Host, in.PID, status,
						ago(in.Started), ago(in.Heartbeat), strings.Join(subs, "; "))
				}
			})
		})
	add(instances)

	migrateRegistry, _ := operatorCommand("migrate-registry", "create the registry's tables (instances, subscriptions, per-minute counts, paused queues)",
		"Creates the tables registered services record themselves in (migrations.ApplyRegistry).\nIdempotent.", false,
		func(ctx context.Context, s *opSession) error {
			if err := migrations.ApplyRegistry(ctx, s.b.DB()); err != nil {
				return err
			}
			return s.emit(map[string]any{"registry": "in place"}, func(w io.Writer) {
				fmt.Fprintf(w, "the registry's tables are in place on %s\n", s.b.Dialect())
			})
		})
	add(migrateRegistry)
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

// preview is the first n characters of b as text, or its size when binary.
func preview(b []byte, n int) string {
	if !utf8.Valid(b) {
		return fmt.Sprintf("(%d bytes)", len(b))
	}
	s := strings.Join(strings.Fields(string(b)), " ")
	if utf8.RuneCountInString(s) > n {
		s = string([]rune(s)[:n]) + "…"
	}
	if s == "" {
		return "-"
	}
	return s
}

type queueJSON struct {
	Table     string `json:"table"`
	Group     string `json:"group"`
	Available int64  `json:"available"`
	Held      int64  `json:"held"`
	Delayed   int64  `json:"delayed"`
	Parked    int64  `json:"parked"`
	Capped    bool   `json:"capped"`
	// OldestAgeSeconds is the oldest available row's age; null when none.
	OldestAgeSeconds *float64 `json:"oldest_age_seconds"`
	Instances        int      `json:"instances"`
	Workers          int      `json:"workers"`
	Paused           bool     `json:"paused"`
	Error            string   `json:"error,omitempty"`
}

func queuesJSON(qs []inbox.QueueInfo) []queueJSON {
	out := []queueJSON{}
	for _, q := range qs {
		j := queueJSON{Table: q.Table, Group: q.Group, Available: q.State.Available, Held: q.State.Held, Delayed: q.State.Delayed,
			Parked: q.State.Parked, Capped: q.State.Capped, Instances: q.Instances, Workers: q.Workers, Paused: q.Paused}
		if !q.State.Oldest.IsZero() {
			a := time.Since(q.State.Oldest).Seconds()
			j.OldestAgeSeconds = &a
		}
		if q.StateErr != nil {
			j.Error = q.StateErr.Error()
		}
		out = append(out, j)
	}
	return out
}

type rowJSON struct {
	ID          int64      `json:"id"`
	State       string     `json:"state"`
	Attempts    int64      `json:"attempts"`
	LockedUntil *time.Time `json:"locked_until"`
	LastError   string     `json:"last_error,omitempty"`
	Created     *time.Time `json:"created_at,omitempty"`
	Payload     string     `json:"payload"`
}

func rowsJSON(rs []inbox.Row) []rowJSON {
	out := []rowJSON{}
	for _, r := range rs {
		j := rowJSON{ID: r.ID, State: r.State, Attempts: r.Attempts, LastError: r.LastError, Payload: string(r.Payload)}
		if !r.LockedUntil.IsZero() {
			j.LockedUntil = &r.LockedUntil
		}
		if !r.Created.IsZero() {
			j.Created = &r.Created
		}
		out = append(out, j)
	}
	return out
}
