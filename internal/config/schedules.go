package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/slotd/slotd/scheduler/schedule"
)

// readSchedule reads a task's schedule keys: schedule or schedules (one of
// them), active_from and active_until, with H hashed by the task's name. zone
// is the task's zone, "" also when the timezone key was bad (then the specs
// are still checked, in UTC, but no schedule is returned). spec is the
// schedule as written, the specs joined by "; " for schedules.
func readSchedule(t table, name, zone string, zoneOK bool) (spec string, sched *schedule.Schedule) {
	var specs []string
	key := "schedule"
	switch {
	case t.has("schedule") && t.has("schedules"):
		t.errorf("schedules", "set either schedule or schedules, not both")
		return "", nil
	case t.has("schedules"):
		key = "schedules"
		var ok bool
		if specs, ok = stringList(t, key); !ok {
			return "", nil
		}
		if len(specs) == 0 {
			t.errorf(key, "empty: list at least one cron spec, or use schedule")
			return "", nil
		}
	case !t.has("schedule"):
		t.errorf("schedule", "required (a cron spec such as \"0 * * * *\", or \"@every 5m\"; or schedules = [...] for several)")
		return "", nil
	default:
		s, ok := t.str("schedule")
		if !ok {
			return "", nil
		}
		specs = []string{s}
	}
	spec = strings.Join(specs, "; ")

	var parts []*schedule.Schedule
	seen := map[string]int{}
	for i, sp := range specs {
		where := key
		if key == "schedules" {
			where = fmt.Sprintf("schedules[%d]", i)
		}
		s, err := schedule.Parse(sp, zone, schedule.HashKey(name))
		if err != nil {
			t.p.add(fmt.Errorf("%s%s: %w", t.prefix(), where, err))
			continue
		}
		if j, dup := seen[s.Spec()]; dup {
			t.errorf(key, "schedules[%d] and schedules[%d] are the same spec %q", j, i, s.Spec())
		}
		seen[s.Spec()] = i
		if strings.HasPrefix(strings.TrimSpace(sp), "@every") && zone != "" && zone != "UTC" {
			t.errorf("timezone", "%q has no effect on %q: @every fires at multiples of its duration since the Unix epoch, the same instants in every zone; remove timezone (or use a cron spec to fire on %s's wall clock)",
				zone, sp, zone)
		}
		parts = append(parts, s)
	}
	from, fromOK := instant(t, "active_from")
	until, untilOK := instant(t, "active_until")
	if !fromOK || !untilOK || len(parts) != len(specs) {
		return spec, nil
	}
	combined, err := schedule.Combine(parts, schedule.Bounds{From: from, Until: until})
	if err != nil {
		t.wrapf("active_until", err)
		return spec, nil
	}
	if !from.IsZero() && !until.IsZero() && combined.Next(from.Add(-time.Second)).IsZero() {
		t.errorf("active_until", "no fire time of %q between active_from and active_until", spec)
	}
	if !zoneOK {
		return spec, nil
	}
	return spec, combined
}

// stringList reads an array of strings at key.
func stringList(t table, key string) ([]string, bool) {
	v := t.m[key]
	list, ok := v.([]any)
	if !ok {
		t.errorf(key, "must be an array of cron specs, not %s", tomlType(v))
		return nil, false
	}
	out := make([]string, 0, len(list))
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			t.errorf(key, "element %d must be a string, not %s", i, tomlType(e))
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// instant reads an RFC 3339 time at key: a string, or a TOML date-time
// with an offset. A local date-time has no single instant (each replica's
// zone would differ) and is refused.
func instant(t table, key string) (time.Time, bool) {
	v, ok := t.m[key]
	if !ok {
		return time.Time{}, true
	}
	var at time.Time
	switch v := v.(type) {
	case string:
		var err error
		if at, err = time.Parse(time.RFC3339, v); err != nil {
			t.errorf(key, "%q: want an RFC 3339 time with an offset, such as \"2027-01-01T00:00:00Z\"", v)
			return time.Time{}, false
		}
	case time.Time:
		if strings.Contains(v.Location().String(), "local") {
			t.errorf(key, "a local date-time has no offset: write one, such as 2027-01-01T00:00:00Z")
			return time.Time{}, false
		}
		at = v
	default:
		t.errorf(key, "must be an RFC 3339 time such as \"2027-01-01T00:00:00Z\", not %s", tomlType(v))
		return time.Time{}, false
	}
	return at.UTC(), true
}

// readJitter reads a task's jitter and checks it against the slot window:
// each slot starts up to jitter after its slot time, so the jitter must be
// shorter than the window (window 0: unknown, not checked).
func readJitter(t table, window time.Duration) time.Duration {
	o := t.duration("jitter", positive)
	if !o.set || o.bad {
		return 0
	}
	if window > 0 && o.v >= window {
		t.errorf("jitter", "%v is not shorter than the slot window %v: a delayed start would fall past the deadline; lower jitter or raise deadline", o.v, window)
		return 0
	}
	return o.v
}

// MaxRunningLimit bounds [daemon] max_running: a cap above it caps nothing
// a replica could run.
const MaxRunningLimit = 1_000_000

// readMaxRunning reads [daemon] max_running.
func (c *Config) readMaxRunning(t table) {
	if o := t.integer("max_running", 0, MaxRunningLimit, "attempts this replica runs at once; 0: no cap"); o.set && !o.bad {
		c.MaxRunning = o.v
	}
}
