package schedule

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// Status is what the schedule tables on a database hold now, as an
// operator sees it (the dashboard's schedules page): who takes part in each
// schedule, its latest moments with the membership that shared them, and the
// shares of moments not yet done.
type Status struct {
	Heartbeats []Heartbeat
	Moments    []Moment
	Shares     []Share
}

// Heartbeat is one instance's membership of one schedule.
type Heartbeat struct {
	Schedule, Instance string
	Runners            int
	Expires            time.Time
}

// Moment is one moment of a schedule: the instance that wrote it first and
// the members it was shared among.
type Moment struct {
	Schedule string
	FiredAt  time.Time
	Writer   string
	Members  []string // instance names, in order
	Runners  int      // the moment's runs in all
}

// Share is one share of a moment not yet done: dealt to an instance, held
// by the instance running it (empty while nobody has claimed it).
type Share struct {
	Schedule        string
	Moment          time.Time
	Worker, Workers int
	DealtTo, Holder string
	LockedUntil     time.Time
}

// Inspect reads the schedule tables on db: every heartbeat, and the latest
// moments and open shares (at most limit of each).
func Inspect(ctx context.Context, db *sql.DB, limit int) (Status, error) {
	d, err := dialect.Detect(db)
	if err != nil {
		return Status{}, fmt.Errorf("schedule: %w", err)
	}
	times := dialect.Times{Kind: d.Kind, Encoding: dialect.EncodingFor(d.Kind, "TEXT")}
	q := d.ScheduleInspect()
	var st Status
	decode := func(v any) time.Time { at, _, _ := times.Decode(v); return at }
	err = each(ctx, db, q.Beats, nil, func(scan func(...any) error) error {
		var h Heartbeat
		var exp any
		err := scan(&h.Schedule, &h.Instance, &h.Runners, &exp)
		h.Expires = decode(exp)
		st.Heartbeats = append(st.Heartbeats, h)
		return err
	})
	if err == nil {
		err = each(ctx, db, q.Moments, []any{limit}, func(scan func(...any) error) error {
			var m Moment
			var fired any
			var members string
			if err := scan(&m.Schedule, &fired, &m.Writer, &members); err != nil {
				return err
			}
			m.FiredAt = decode(fired)
			var ms []member
			_ = json.Unmarshal([]byte(members), &ms)
			for _, x := range ms {
				m.Members = append(m.Members, x.Instance)
				m.Runners += x.Runners
			}
			st.Moments = append(st.Moments, m)
			return nil
		})
	}
	if err == nil {
		err = each(ctx, db, q.Shares, []any{limit}, func(scan func(...any) error) error {
			var s Share
			var moment int64
			var until any
			err := scan(&s.Schedule, &moment, &s.Worker, &s.Workers, &s.DealtTo, &s.Holder, &until)
			s.Moment, s.LockedUntil = time.UnixMilli(moment), decode(until)
			st.Shares = append(st.Shares, s)
			return err
		})
	}
	if err != nil {
		return Status{}, fmt.Errorf("schedule: inspect the schedule tables: %w (did migrations.ApplySchedules run?)", err)
	}
	return st, nil
}

// each runs query and calls row for each row it returns.
func each(ctx context.Context, db *sql.DB, query string, args []any, row func(scan func(...any) error) error) error {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}
