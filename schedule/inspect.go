package schedule

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/sqlinbox/sqlinbox/internal/dialect"
)

// Status is what the schedule tables on a database hold now, as an
// operator sees it (the dashboard's schedules page): each schedule as its
// instances last told it (spec, next moments, runs and failures), who takes
// part in it, its latest moments with the membership that shared them and
// what became of each share.
type Status struct {
	Schedules  []Summary
	Heartbeats []Heartbeat
	Moments    []Moment
	Shares     []Share // the latest shares, done or not
}

// Summary is one schedule as the heartbeats of its instances tell it.
type Summary struct {
	Name, Spec, Placement string
	// Next are the schedule's next moments after the time of Inspect,
	// computed from its spec; without a readable spec (an instance of an
	// earlier version), the next moments its instances last wrote.
	Next []time.Time
	// Runs and Failures sum the instances' counts since each started;
	// LastError is the latest failure's error (at most MaxErrorText bytes),
	// at LastErrorAt on instance LastErrorBy.
	Runs, Failures int64
	LastError      string
	LastErrorAt    time.Time
	LastErrorBy    string
	Members        []Heartbeat // live and expired
	// Override is the placement an operator set over the code's
	// (SetPlacement), which every instance runs the schedule under; nil
	// when none is set. Placement is the code's.
	Override *Override
}

// Heartbeat is one instance's membership of one schedule, and what it
// last told of it: its next moment, its runs and failures since it started.
type Heartbeat struct {
	Schedule, Instance string
	Runners            int
	Expires            time.Time
	Spec, Placement    string
	NextAt             time.Time
	Runs, Failures     int64
	LastError          string
	LastErrorAt        time.Time
}

// Moment is one moment of a schedule: the instance that wrote it first and
// the members it was shared among, and its shares as far as they are kept.
type Moment struct {
	Schedule string
	FiredAt  time.Time
	Writer   string
	Members  []string // instance names, in order
	Runners  int      // the moment's runs in all
	// Shares are the moment's shares found among Status.Shares, by worker;
	// Done and Failed count those done and those whose handler failed.
	Shares       []Share
	Done, Failed int
}

// Share is one share of a moment: dealt to an instance, held by the
// instance running it (empty while nobody has claimed it). A done share
// has DoneAt, and Error when its handler failed.
type Share struct {
	Schedule        string
	Moment          time.Time
	Worker, Workers int
	DealtTo, Holder string
	LockedUntil     time.Time
	DoneAt          time.Time
	Error           string
}

// Inspect reads the schedule tables on db: every heartbeat, the latest
// limit moments and the latest shares (at most 20 times limit: a moment
// has a share per run).
func Inspect(ctx context.Context, db *sql.DB, limit int) (Status, error) {
	d, err := dialect.Detect(db)
	if err != nil {
		return Status{}, fmt.Errorf("schedule: %w", err)
	}
	times := dialect.Times{Kind: d.Kind, Encoding: dialect.EncodingFor(d.Kind, "TEXT")}
	q := d.ScheduleInspect()
	var st Status
	decode := func(v any) time.Time { at, _, _ := times.Decode(v); return at }
	err = each(ctx, db, q.Beats.Call(), func(scan func(...any) error) error {
		var h Heartbeat
		var exp, next, errAt any
		err := scan(&h.Schedule, &h.Instance, &h.Runners, &exp, &h.Spec, &h.Placement, &next, &h.Runs, &h.Failures, &h.LastError, &errAt)
		h.Expires, h.NextAt, h.LastErrorAt = decode(exp), decode(next), decode(errAt)
		st.Heartbeats = append(st.Heartbeats, h)
		return err
	})
	if err == nil {
		err = each(ctx, db, q.Moments.Call(limit), func(scan func(...any) error) error {
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
		err = each(ctx, db, q.Shares.Call(20*limit), func(scan func(...any) error) error {
			var s Share
			var moment int64
			var until, done any
			var text sql.NullString
			err := scan(&s.Schedule, &moment, &s.Worker, &s.Workers, &s.DealtTo, &s.Holder, &until, &done, &text)
			s.Moment, s.LockedUntil, s.DoneAt, s.Error = time.UnixMilli(moment), decode(until), decode(done), text.String
			st.Shares = append(st.Shares, s)
			return err
		})
	}
	if err != nil {
		return Status{}, fmt.Errorf("schedule: inspect the schedule tables: %w (did migrations.ApplySchedules run?)", err)
	}
	st.summarize(time.Now())
	over, err := Overrides(ctx, db)
	if err != nil {
		return Status{}, err
	}
	for i := range st.Schedules {
		if o, ok := over[st.Schedules[i].Name]; ok {
			st.Schedules[i].Override = &o
		}
	}
	return st, nil
}

// summarize fills Schedules from the heartbeats and each moment's shares.
func (st *Status) summarize(now time.Time) {
	type key struct {
		schedule string
		moment   int64
	}
	byMoment := map[key]*Moment{}
	for i := range st.Moments {
		m := &st.Moments[i]
		byMoment[key{m.Schedule, m.FiredAt.UnixMilli()}] = m
	}
	for _, sh := range st.Shares {
		if m := byMoment[key{sh.Schedule, sh.Moment.UnixMilli()}]; m != nil {
			m.Shares = append(m.Shares, sh)
			if !sh.DoneAt.IsZero() {
				m.Done++
			}
			if sh.Error != "" {
				m.Failed++
			}
		}
	}
	for _, m := range st.Moments {
		slices.SortFunc(m.Shares, func(a, b Share) int { return a.Worker - b.Worker })
	}
	index := map[string]int{}
	for _, h := range st.Heartbeats {
		i, ok := index[h.Schedule]
		if !ok {
			i = len(st.Schedules)
			index[h.Schedule] = i
			st.Schedules = append(st.Schedules, Summary{Name: h.Schedule})
		}
		sum := &st.Schedules[i]
		sum.Members = append(sum.Members, h)
		sum.Runs += h.Runs
		sum.Failures += h.Failures
		if sum.Spec == "" || h.Expires.After(now) {
			sum.Spec, sum.Placement = or(h.Spec, sum.Spec), or(h.Placement, sum.Placement)
		}
		if h.LastErrorAt.After(sum.LastErrorAt) {
			sum.LastError, sum.LastErrorAt, sum.LastErrorBy = h.LastError, h.LastErrorAt, h.Instance
		}
	}
	for i := range st.Schedules {
		st.Schedules[i].Next = nextMoments(st.Schedules[i], now, 3)
	}
}

// nextMoments are the first n moments of sum's schedule after now.
func nextMoments(sum Summary, now time.Time, n int) []time.Time {
	var out []time.Time
	if spec, err := parseSpec(sum.Spec); err == nil {
		if m, err := spec.compile(now); err == nil {
			for at := m.next(now); !at.IsZero() && len(out) < n; at = m.next(at) {
				out = append(out, at)
			}
			return out
		}
	}
	for _, h := range sum.Members {
		if h.NextAt.After(now) && !slices.ContainsFunc(out, h.NextAt.Equal) {
			out = append(out, h.NextAt)
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// each runs query and calls row for each row it returns.
func each(ctx context.Context, db *sql.DB, q dialect.Call, row func(scan func(...any) error) error) error {
	rows, err := db.QueryContext(ctx, q.SQL, q.Args...)
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
