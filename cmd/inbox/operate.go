package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sqlinbox/sqlinbox/inbox"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// scope is what an operator command works on, and so which flags it takes.
type scope int

const (
	onDatabase scope = iota // --db, --json
	onTable                 // and --table, --group (pause, resume)
	onRows                  // and the column flags and --lease (rows, unpark, stats...)
)

// roleOrder is the order the column flags are listed and checked in.
var roleOrder = []inbox.Role{inbox.RoleID, inbox.RoleLockedUntil, inbox.RolePayload, inbox.RoleGroup, inbox.RoleAttempts, inbox.RoleLastError, inbox.RoleCreatedAt}

// required are the roles every queue has; the others are optional.
var required = []inbox.Role{inbox.RoleID, inbox.RoleLockedUntil, inbox.RolePayload}

func roleFlag(r inbox.Role) string { return strings.ReplaceAll(string(r), "_", "-") + "-column" }

// opFlags are the flags of an operator command.
type opFlags struct {
	db    string
	json  bool
	table string
	group string
	roles map[inbox.Role]*string
	lease time.Duration
	// create: the command may create the database (a SQLite file), as
	// migrate-registry does; the others refuse one that does not exist.
	create bool
}

// operatorCommand makes a command that works on a database (--db, --json),
// on a table (--table, --group) or on a table's rows (and the column flags
// for a table no registered service subscribes to).
func operatorCommand(use, short, long string, sc scope, run func(ctx context.Context, o *opSession) error) (*cobra.Command, *opFlags) {
	f := &opFlags{roles: map[inbox.Role]*string{}}
	cmd := &cobra.Command{Use: use, Short: short, Long: long, Args: cobra.NoArgs}
	cmd.Flags().StringVar(&f.db, "db", "", "database URL: postgres://..., mysql://... or sqlite:///path.db (required)")
	cmd.Flags().BoolVar(&f.json, "json", false, "print JSON instead of a table (see docs/operating.md)")
	_ = cmd.MarkFlagRequired("db")
	if sc >= onTable {
		cmd.Flags().StringVar(&f.table, "table", "", "the queue's table (required)")
		cmd.Flags().StringVar(&f.group, "group", "", "one group of the table (default: the whole table)")
		_ = cmd.MarkFlagRequired("table")
	}
	if sc >= onRows {
		for _, r := range roleOrder {
			f.roles[r] = cmd.Flags().String(roleFlag(r), "", fmt.Sprintf("the %s column, for a table no registered service subscribes to (default: the registry's, else %q where the table has it; \"-\" for none)", r, inbox.ReferenceRoles()[r]))
		}
		cmd.Flags().DurationVar(&f.lease, "lease", 0, "rows due after a sixth of a lease from now and within it count as held, not delayed (default: the registered subscription's lease, else 30s)")
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		b, err := openDatabase(cmd.Context(), f.db, f.create, 2)
		if err != nil {
			return err
		}
		defer b.Close()
		s := &opSession{flags: f, b: b, op: inbox.NewOperator(b), out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr()}
		if sc == onRows {
			if err := s.resolve(cmd.Context(), f.table, f.group); err != nil {
				return err
			}
		}
		return s.explain(run(cmd.Context(), s))
	}
	return cmd, f
}

// openDatabase opens the database at rawURL, which must exist unless
// create: an operator
// command that created an empty database would then report the registry's
// tables missing, and send the operator looking for the wrong fault.
func openDatabase(ctx context.Context, rawURL string, create bool, conns int) (*inbox.Broker, error) {
	if path, ok := sqliteFile(rawURL); ok && !create {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("database %s does not exist: no file %s", rawURL, path)
		}
	}
	b, err := inbox.Open(rawURL, inbox.MaxConns(conns))
	if err != nil {
		return nil, err
	}
	if err := b.DB().PingContext(ctx); err != nil {
		b.Close()
		if dialect.NoDatabase(err) {
			return nil, fmt.Errorf("database %s does not exist", dialect.Redact(rawURL))
		}
		return nil, fmt.Errorf("connect to %s: %w", dialect.Redact(rawURL), err)
	}
	return b, nil
}

// sqliteFile is the file a sqlite:// URL names, or ok false for another
// database or SQLite in memory.
func sqliteFile(rawURL string) (path string, ok bool) {
	rest, ok := strings.CutPrefix(rawURL, "sqlite://")
	if !ok {
		return "", false
	}
	path, _, _ = strings.Cut(rest, "?")
	if path == "" || strings.HasPrefix(path, ":memory:") {
		return "", false
	}
	return filepath.FromSlash(path), true
}

// opSession is one operator command's run.
type opSession struct {
	flags  *opFlags
	b      *inbox.Broker
	op     *inbox.Operator
	out    io.Writer
	errOut io.Writer
	ref    inbox.QueueRef
	// guessed: ref's columns are the reference table's names found in the
	// catalog, not a registered subscription's or the flags': a table
	// check's fix is not printed for them.
	guessed bool
}

// resolve finds the columns of table: from the flags, else from a
// registered subscription to the table (of any group), else from the
// catalog where the table has the reference table's names (and its id on
// its integer primary key). Every column is checked against the catalog,
// so a missing one is reported, never answered with DDL that adds it.
func (s *opSession) resolve(ctx context.Context, table, group string) error {
	f := s.flags
	cols, err := s.existing(ctx, table)
	if err != nil {
		return err
	}
	s.ref = inbox.QueueRef{Table: table, Group: group, Lease: f.lease}
	source := map[inbox.Role]string{}
	reg, registered, regErr := s.op.Lookup(ctx, table, group)
	roles := map[inbox.Role]string{}
	if registered {
		for r, c := range reg.Roles {
			roles[r], source[r] = c, "the registered subscription's"
		}
		if s.ref.Lease == 0 {
			s.ref.Lease = reg.Lease
		}
		s.warnUnread(ctx, table, group)
	} else {
		roles = catalogRoles(cols)
		for r := range roles {
			source[r] = "the reference table's"
		}
		s.guessed = true
	}
	for r, p := range f.roles {
		switch *p {
		case "":
		case "-":
			delete(roles, r)
		default:
			roles[r], source[r] = *p, "--"+roleFlag(r)
		}
	}
	var missing []string
	for _, r := range required {
		if roles[r] == "" {
			missing = append(missing, "--"+roleFlag(r))
		}
	}
	if group != "" && roles[inbox.RoleGroup] == "" {
		missing = append(missing, "--"+roleFlag(inbox.RoleGroup))
	}
	if len(missing) > 0 {
		why := fmt.Sprintf("no registered subscription to %s", table)
		if registered {
			return fmt.Errorf("the registered subscriptions to %s name no column for %s (%s has %s)", table, strings.Join(missing, ", "), table, describe(cols))
		}
		if regErr != nil {
			why += fmt.Sprintf(" (the registry could not be read: %v)", regErr)
		}
		return fmt.Errorf("%s, and its columns are not the reference table's: name them with %s (%s has %s)",
			why, strings.Join(missing, ", "), table, describe(cols))
	}
	for _, r := range roleOrder {
		c := roles[r]
		if c != "" && !slices.ContainsFunc(cols, func(tc inbox.TableColumn) bool { return tc.Name == c }) {
			return fmt.Errorf("table %s has no column %q (%s %s column); it has %s", table, c, source[r], r, describe(cols))
		}
	}
	s.ref.Roles = roles
	return nil
}

// existing reads table's columns, or says the table does not exist.
func (s *opSession) existing(ctx context.Context, table string) ([]inbox.TableColumn, error) {
	cols, err := s.op.Columns(ctx, table)
	if err != nil {
		return nil, err
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("table %s does not exist in %s", table, dialect.Redact(s.flags.db))
	}
	return cols, nil
}

// warnUnread warns when no registered subscription reads table (or its
// group): a typo, or a queue whose service is not running.
func (s *opSession) warnUnread(ctx context.Context, table, group string) {
	reads, err := s.read(ctx, table, group)
	if err != nil || reads {
		return
	}
	name := queueName(inbox.QueueRef{Table: table, Group: group})
	fmt.Fprintf(s.errOut, "warning: no registered subscription reads %s%s\n", name, s.subscribedGroups(ctx, table))
}

// read says whether a registered subscription reads table and group: one
// to that group or the whole table, or for the whole table, any.
func (s *opSession) read(ctx context.Context, table, group string) (bool, error) {
	if group == "" {
		_, ok, err := s.op.Lookup(ctx, table, "")
		return ok, err
	}
	_, ok, err := s.op.Ref(ctx, table, group)
	return ok, err
}

// subscribedGroups lists the groups of table registered subscriptions
// read, for a warning.
func (s *opSession) subscribedGroups(ctx context.Context, table string) string {
	insts, err := s.op.Instances(ctx)
	if err != nil {
		return ""
	}
	var groups []string
	for _, in := range insts {
		for _, sub := range in.Subscriptions {
			if sub.Table == table && sub.Group != "" && !slices.Contains(groups, sub.Group) {
				groups = append(groups, sub.Group)
			}
		}
	}
	if len(groups) == 0 {
		return ""
	}
	slices.Sort(groups)
	return " (subscribed groups: " + strings.Join(groups, ", ") + ")"
}

// catalogRoles are the roles of a table nobody registered: the reference
// table's column names where the table has them, and its id on its integer
// primary key when it has no "id".
func catalogRoles(cols []inbox.TableColumn) map[inbox.Role]string {
	roles := map[inbox.Role]string{}
	for r, name := range inbox.ReferenceRoles() {
		if slices.ContainsFunc(cols, func(c inbox.TableColumn) bool { return c.Name == name }) {
			roles[r] = name
		}
	}
	var pk []inbox.TableColumn
	for _, c := range cols {
		if c.PrimaryKey {
			pk = append(pk, c)
		}
	}
	if roles[inbox.RoleID] == "" && len(pk) == 1 && strings.Contains(pk[0].Type, "int") {
		roles[inbox.RoleID] = pk[0].Name
	}
	return roles
}

func describe(cols []inbox.TableColumn) string {
	var parts []string
	for _, c := range cols {
		parts = append(parts, c.Name+" "+c.Type)
	}
	return "columns " + strings.Join(parts, ", ")
}

// explain drops the fix of a table check on columns the command only read
// by the reference table's names: DDL for a table it guessed at could do
// harm.
func (s *opSession) explain(err error) error {
	var te *inbox.TableError
	if !s.guessed || !errors.As(err, &te) || te.Fix == "" {
		return err
	}
	c := *te
	c.Fix, c.Problems = "", nil
	for _, p := range te.Problems {
		p.Fix = ""
		c.Problems = append(c.Problems, p)
	}
	return fmt.Errorf("%w (no registered subscription names its columns: they were taken by the reference table's names; name them with the --*-column flags)", &c)
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
