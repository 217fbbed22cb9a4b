package main

import (
	"encoding/base64"
	"time"
	"unicode/utf8"

	"github.com/sqlinbox/sqlinbox/inbox"
)

// The --json output of every command has one schema (docs/operating.md):
// snake_case keys, durations in seconds as numbers in keys that end in
// _seconds, times as RFC 3339 strings in UTC in keys that end in _at (and
// locked_until), null for a value the row or queue does not have.

type queueJSON struct {
	Table     string `json:"table"`
	Group     string `json:"group"`
	Available int64  `json:"available"`
	Held      int64  `json:"held"`
	Delayed   int64  `json:"delayed"`
	Waiting   int64  `json:"waiting"` // rows waiting for their parents (inbox.After)
	Parked    int64  `json:"parked"`
	Capped    bool   `json:"capped"`
	// OldestAgeSeconds is the oldest available row's age; null when none.
	OldestAgeSeconds *float64 `json:"oldest_age_seconds"`
	Instances        int      `json:"instances"`
	// Polled is how many of those instances pick up rows other processes
	// write at their poll (transaction pooling without ListenURL).
	Polled      int    `json:"polled"`
	Workers     int    `json:"workers"`
	Paused      bool   `json:"paused"`
	TablePaused bool   `json:"table_paused"`
	Error       string `json:"error,omitempty"`
	// Limits are the limits per key the table's rows take slots of, as
	// limits prints them.
	Limits []limitJSON `json:"limits"`
}

func queuesJSON(qs []inbox.QueueInfo, ls []inbox.LimitUse) []queueJSON {
	out := []queueJSON{}
	for _, q := range qs {
		var mine []inbox.LimitUse
		for _, l := range ls {
			if l.OnTable(q.Table) {
				mine = append(mine, l)
			}
		}
		j := queueJSON{Table: q.Table, Group: q.Group, Available: q.State.Available, Held: q.State.Held, Delayed: q.State.Delayed,
			Waiting: q.State.Waiting, Parked: q.State.Parked, Capped: q.State.Capped, Instances: q.Instances, Polled: q.Polled, Workers: q.Workers, Paused: q.Paused,
			TablePaused: q.TablePaused, OldestAgeSeconds: ageSeconds(q.State.Oldest), Limits: limitsJSON(mine)}
		if q.StateErr != nil {
			j.Error = q.StateErr.Error()
		}
		out = append(out, j)
	}
	return out
}

// statsJSON is one queue's counts (stats).
type statsJSON struct {
	Table            string   `json:"table"`
	Group            string   `json:"group"`
	Available        int64    `json:"available"`
	Held             int64    `json:"held"`
	Delayed          int64    `json:"delayed"`
	Waiting          int64    `json:"waiting"`
	Parked           int64    `json:"parked"`
	Capped           bool     `json:"capped"`
	OldestAgeSeconds *float64 `json:"oldest_age_seconds"`
}

func ageSeconds(t time.Time) *float64 {
	if t.IsZero() {
		return nil
	}
	a := time.Since(t).Seconds()
	return &a
}

type rowJSON struct {
	ID          int64      `json:"id"`
	State       string     `json:"state"`
	Attempts    int64      `json:"attempts"`
	LockedUntil *time.Time `json:"locked_until"`
	LastError   *string    `json:"last_error"`
	CreatedAt   *time.Time `json:"created_at"`
	// Payload is the payload as text when it is UTF-8; PayloadBase64
	// holds it otherwise.
	Payload       *string `json:"payload"`
	PayloadBase64 string  `json:"payload_base64,omitempty"`
	// A done row's (--state done): when, by which instance and how long.
	HandledAt       *time.Time `json:"handled_at,omitempty"`
	HandledBy       string     `json:"handled_by,omitempty"`
	DurationSeconds *float64   `json:"duration_seconds,omitempty"`
}

func toRowJSON(r inbox.Row) rowJSON {
	j := rowJSON{ID: r.ID, State: r.State, Attempts: r.Attempts, LockedUntil: utc(r.LockedUntil), CreatedAt: utc(r.Created)}
	if r.State == inbox.StateDone {
		took := r.Took.Seconds()
		j.HandledAt, j.HandledBy, j.DurationSeconds = utc(r.Handled), r.HandledBy, &took
	}
	if r.LastError != "" {
		j.LastError = &r.LastError
	}
	if utf8.Valid(r.Payload) {
		p := string(r.Payload)
		j.Payload = &p
	} else {
		j.PayloadBase64 = base64.StdEncoding.EncodeToString(r.Payload)
	}
	return j
}

func rowsJSON(rs []inbox.Row) []rowJSON {
	out := []rowJSON{}
	for _, r := range rs {
		out = append(out, toRowJSON(r))
	}
	return out
}

func utc(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

type instanceJSON struct {
	ID                       string     `json:"id"`
	Service                  string     `json:"service"`
	Version                  string     `json:"version"`
	Host                     string     `json:"host"`
	PID                      int        `json:"pid"`
	Alive                    bool       `json:"alive"`
	StartedAt                *time.Time `json:"started_at"`
	HeartbeatAt              *time.Time `json:"heartbeat_at"`
	HeartbeatIntervalSeconds float64    `json:"heartbeat_interval_seconds"`
	// PickupFallback says why rows other processes write wait for the
	// instance's poll; "" when they do not.
	PickupFallback string             `json:"pickup_fallback"`
	Subscriptions  []subscriptionJSON `json:"subscriptions"`
}

type subscriptionJSON struct {
	Name         string            `json:"name"`
	Table        string            `json:"table"`
	Group        string            `json:"group"`
	Form         string            `json:"form"`
	Workers      int               `json:"workers"`
	LeaseSeconds float64           `json:"lease_seconds"`
	Columns      map[string]string `json:"columns"` // column by role
}

func instancesJSON(is []inbox.Instance) []instanceJSON {
	out := []instanceJSON{}
	for _, in := range is {
		j := instanceJSON{ID: in.ID, Service: in.Service, Version: in.Version, Host: in.Host, PID: in.PID, Alive: in.Alive,
			StartedAt: utc(in.Started), HeartbeatAt: utc(in.Heartbeat), HeartbeatIntervalSeconds: in.Every.Seconds(), PickupFallback: in.PickupFallback,
			Subscriptions: []subscriptionJSON{}}
		for _, s := range in.Subscriptions {
			cols := map[string]string{}
			for r, c := range s.Roles {
				cols[string(r)] = c
			}
			j.Subscriptions = append(j.Subscriptions, subscriptionJSON{Name: s.Name, Table: s.Table, Group: s.Group, Form: s.Form,
				Workers: s.Workers, LeaseSeconds: s.Lease.Seconds(), Columns: cols})
		}
		out = append(out, j)
	}
	return out
}

// changeJSON is what unpark, run-now and delete did.
type changeJSON struct {
	Table   string `json:"table"`
	Group   string `json:"group"`
	Action  string `json:"action"`
	Changed int64  `json:"changed"`
}

// pauseJSON is what pause and resume did.
type pauseJSON struct {
	Table  string `json:"table"`
	Group  string `json:"group"`
	Paused bool   `json:"paused"`
}

// migrateJSON is what migrate did.
type migrateJSON struct {
	Dialect string `json:"dialect"`
	Table   string `json:"table"`
	Trigger bool   `json:"trigger"` // the notify trigger is in place
}

// registryJSON is what migrate-registry did.
type registryJSON struct {
	Dialect  string `json:"dialect"`
	Registry bool   `json:"registry"` // the registry's tables are in place
}
