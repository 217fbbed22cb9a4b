package inbox

import (
	"context"
	"fmt"
	"slices"
	"strings"

	iclaim "github.com/sqlinbox/sqlinbox/internal/claim"
	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// FairBy makes a subscription over a whole table share its claims fairly
// between the values of column (a tenant, a customer, the group column):
// each claim takes rows of one value, the next value after the last one
// served that has a row available, and goes on to the values after it
// only while it is short. A backlog of any size under one value then
// delays a row of another by about one claim, where a subscription without
// it takes rows in id order and makes that row wait for the whole backlog
// before it. Within one value rows still go in claim order (id, or
// priority then id).
//
// Each claim costs one more statement (an index probe for the next value)
// and takes rows of fewer values at once; acks batch per value. The table
// check asks for an index whose columns start with (column, id) (column,
// priority, id with a priority column) and for column to be NOT NULL, and
// prints the DDL of each. It serves every form on every database; it is
// refused on a queue of one group (Queue.Group), whose rows share one
// value already. Default: none (rows in claim order). Bound: column an
// identifier.
func FairBy(column string) SubOption {
	return func(c *subConfig) error {
		if err := dialect.CheckIdent(column); err != nil {
			return fmt.Errorf("inbox: %w: FairBy(%q): %w", ErrInvalid, column, err)
		}
		c.fairBy = column
		return nil
	}
}

// fairClaimer checks what FairBy needs of table t, and makes the claimer
// that takes rows round-robin between the values of its column.
func (s *Subscription) fairClaimer(ctx context.Context, env iclaim.Env) (iclaim.Claimer, error) {
	b, d, col := s.b, s.b.d, s.cfg.fairBy
	table := s.table
	cols, err := d.Columns(ctx, b.db, table)
	if err != nil {
		return nil, fmt.Errorf("inbox: table %q: %w", table, err)
	}
	i := slices.IndexFunc(cols, func(c dialect.Column) bool { return c.Name == col })
	if i < 0 {
		return nil, tableError(table, []TableProblem{{Column: col, Problem: "is missing (FairBy shares claims between its values)",
			Fix: fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s TEXT NOT NULL DEFAULT ''", d.Quote(table), d.Quote(col))}})
	}
	var problems []TableProblem
	if !cols[i].NotNull {
		fill := "0"
		if t := cols[i].Type; strings.Contains(t, "char") || strings.Contains(t, "text") {
			fill = "''"
		}
		fix, err := d.NotNullFix(ctx, b.db, table, cols, col, fill)
		if err != nil {
			return nil, fmt.Errorf("inbox: table %q: write the fix: %w", table, err)
		}
		problems = append(problems, TableProblem{Column: col, Problem: "may hold NULL, and FairBy claims only rows with a value: declare it NOT NULL", Fix: fix})
	}
	idx, err := d.Indexes(ctx, b.db, table)
	if err != nil {
		return nil, fmt.Errorf("inbox: table %q: %w", table, err)
	}
	want := []string{col}
	if p := s.shape.column(RolePriority); p != "" {
		want = append(want, p)
	}
	want = append(want, s.shape.column(RoleID))
	if !d.Serves(idx, want) {
		problems = append(problems, TableProblem{Column: col, Problem: fmt.Sprintf("has no index serving FairBy's claims of one value and its probe for the next (an index whose columns start with (%s))", strings.Join(want, ", ")) + partialNote(d, idx, want),
			Fix: d.CreateIndex(table, want, false, "fair")})
	}
	if len(problems) > 0 {
		return nil, tableError(table, problems)
	}
	env.Table.Group = d.Quote(col)
	env.SQL = b.inboxSQL(env.Table)
	c, err := iclaim.NewFair(s.cfg.form, env)
	if err != nil {
		return nil, fmt.Errorf("inbox: subscription %q: %w", s.cfg.name, err)
	}
	return c, nil
}
