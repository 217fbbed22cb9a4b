package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Spec says when a schedule fires: Every(d) or Cron(expr, zone). Its moments
// are computed, never read from a clock, so every instance reaches the same
// moments. The zero Spec is refused by Add.
type Spec struct {
	every time.Duration
	expr  string
	zone  string
	kind  int // 0: unset, 1: every, 2: cron
}

// Every fires at every multiple of d counted from the Unix epoch (so
// Every(time.Hour) fires on the hour on every instance, whenever it started).
// d must be a whole number of milliseconds, the finest step every database
// keeps.
func Every(d time.Duration) Spec { return Spec{every: d, kind: 1} }

// Cron fires on a cron expression read in the time zone zone (an IANA name
// such as "Europe/Paris"; "" means UTC; "Local", the host's zone, is refused,
// so that hosts in different zones agree). Runs get FiredAt in that zone. The expression has five fields (minute,
// hour, day of month, month, day of week), or six with a leading seconds
// field, or is a descriptor such as "@daily" or "@hourly". "@every" is
// refused: use Every, whose moments are anchored and so shared by all
// instances. The zone goes in zone, not as a TZ= prefix.
func Cron(expr, zone string) Spec { return Spec{expr: expr, zone: zone, kind: 2} }

// String writes the spec as a user would read it in a log.
func (s Spec) String() string {
	switch s.kind {
	case 1:
		return "every " + s.every.String()
	case 2:
		if s.zone == "" {
			return "cron " + s.expr + " (UTC)"
		}
		return "cron " + s.expr + " (" + s.zone + ")"
	}
	return "unset"
}

// parseSpec reads a spec back from its String, as the heartbeats table
// keeps it for operators.
func parseSpec(text string) (Spec, error) {
	if d, ok := strings.CutPrefix(text, "every "); ok {
		every, err := time.ParseDuration(d)
		if err != nil {
			return Spec{}, fmt.Errorf("%w: %q: %v", ErrSpec, text, err)
		}
		return Every(every), nil
	}
	if rest, ok := strings.CutPrefix(text, "cron "); ok && strings.HasSuffix(rest, ")") {
		if i := strings.LastIndex(rest, " ("); i >= 0 {
			zone := rest[i+2 : len(rest)-1]
			if zone == "UTC" {
				zone = ""
			}
			return Cron(rest[:i], zone), nil
		}
	}
	return Spec{}, fmt.Errorf("%w: %q is not a spec's String", ErrSpec, text)
}

// moments yields the moments of a schedule.
type moments interface {
	// next returns the first moment strictly after t, or the zero time when
	// there is none.
	next(t time.Time) time.Time
	// zone is the location moments are returned in.
	zone() *time.Location
}

type every time.Duration

func (every) zone() *time.Location { return time.UTC }

func (e every) next(t time.Time) time.Time {
	d := time.Duration(e)
	// Count from the epoch in whole intervals. floor division keeps times
	// before the epoch right as well.
	since := t.Sub(time.Unix(0, 0))
	n := since / d
	if since%d < 0 {
		n--
	}
	return time.Unix(0, 0).Add((n + 1) * d).UTC()
}

// cronMoments are the moments of a cron expression, returned in its zone.
type cronMoments struct {
	s   cron.Schedule
	loc *time.Location
}

func (c cronMoments) zone() *time.Location { return c.loc }

func (c cronMoments) next(t time.Time) time.Time {
	at := c.s.Next(t)
	if at.IsZero() {
		return at
	}
	return at.In(c.loc)
}

var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ErrSpec marks a spec that Add refused.
var ErrSpec = errors.New("invalid spec")

// compile checks a spec and returns its moments.
func (s Spec) compile(now time.Time) (moments, error) {
	switch s.kind {
	case 1:
		if s.every <= 0 {
			return nil, fmt.Errorf("%w: interval %v is not positive", ErrSpec, s.every)
		}
		if s.every < time.Millisecond {
			return nil, fmt.Errorf("%w: interval %v is below a millisecond, the finest step the database keeps", ErrSpec, s.every)
		}
		if s.every%time.Millisecond != 0 {
			return nil, fmt.Errorf("%w: interval %v is not a whole number of milliseconds, the finest step the database keeps", ErrSpec, s.every)
		}
		return every(s.every), nil
	case 2:
		expr := strings.TrimSpace(s.expr)
		if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
			return nil, fmt.Errorf("%w: cron %q: give the time zone as Cron's zone argument, not as a prefix", ErrSpec, s.expr)
		}
		if strings.HasPrefix(expr, "@every") {
			return nil, fmt.Errorf("%w: cron %q: @every counts from each instance's start, so instances would not agree on moments; use schedule.Every", ErrSpec, s.expr)
		}
		loc := time.UTC
		if s.zone == "Local" {
			return nil, fmt.Errorf("%w: time zone \"Local\" is the host's zone, which hosts do not share; name the zone (such as \"Europe/Paris\"), or give \"\" for UTC", ErrSpec)
		}
		if s.zone != "" {
			l, err := time.LoadLocation(s.zone)
			if err != nil {
				return nil, fmt.Errorf("%w: time zone %q: %v", ErrSpec, s.zone, err)
			}
			loc = l
		}
		parsed, err := parser.Parse(expr)
		if err != nil {
			return nil, fmt.Errorf("%w: cron %q: %v", ErrSpec, s.expr, err)
		}
		spec, ok := parsed.(*cron.SpecSchedule)
		if !ok {
			return nil, fmt.Errorf("%w: cron %q: unsupported schedule %T", ErrSpec, s.expr, parsed)
		}
		spec.Location = loc
		m := cronMoments{s: spec, loc: loc}
		if m.next(now).IsZero() {
			return nil, fmt.Errorf("%w: cron %q never fires", ErrSpec, s.expr)
		}
		return m, nil
	}
	return nil, fmt.Errorf("%w: no spec: use schedule.Every or schedule.Cron", ErrSpec)
}
