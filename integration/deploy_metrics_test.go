package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/slotd/slotd/internal/stats"
)

// exported is what a scrape shows: each sample name (a histogram's
// name_bucket, name_sum and name_count) with its label names, and each
// label's values.
type exported struct {
	labels map[string][]string            // sample name -> label names (with job, instance, as Prometheus adds)
	values map[string]map[string][]string // sample name -> label -> values seen
}

func exportedFrom(mfs families) exported {
	e := exported{labels: map[string][]string{}, values: map[string]map[string][]string{}}
	add := func(name string, labels []*dto.LabelPair, extra ...string) {
		ls := append([]string{"job", "instance"}, extra...)
		if e.values[name] == nil {
			e.values[name] = map[string][]string{}
		}
		for _, lp := range labels {
			ls = append(ls, lp.GetName())
			if !slices.Contains(e.values[name][lp.GetName()], lp.GetValue()) {
				e.values[name][lp.GetName()] = append(e.values[name][lp.GetName()], lp.GetValue())
			}
		}
		for _, l := range ls {
			if !slices.Contains(e.labels[name], l) {
				e.labels[name] = append(e.labels[name], l)
			}
		}
	}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				add(name+"_bucket", m.GetLabel(), "le")
				add(name+"_sum", m.GetLabel())
				add(name+"_count", m.GetLabel())
			case dto.MetricType_SUMMARY:
				add(name, m.GetLabel(), "quantile")
				add(name+"_sum", m.GetLabel())
				add(name+"_count", m.GetLabel())
			default:
				add(name, m.GetLabel())
			}
		}
	}
	return e
}

// referenced lists the metric names of queries.
func referenced(t *testing.T, qs []query) []string {
	t.Helper()
	var names []string
	for _, q := range qs {
		n, err := parsePromQL(q.expr)
		if err != nil {
			t.Fatalf("%s: %v", q.where, err)
		}
		for _, r := range n.refs {
			if !slices.Contains(names, r.metric) {
				names = append(names, r.metric)
			}
		}
	}
	slices.Sort(names)
	return names
}

// Every metric the dashboard and the alert rules refer to is one a running
// slotd exports, with the labels they match and group on, and the
// outcome/result values they filter by.
//
// The daemon creates a task's series when it first counts something for
// that task, so the exported set is read from a replica that goes through
// every event the files look at: ok succeeds; broken fails with
// max_attempts 1 (exhausted slots); late fails slowly past its window
// (missed slots); hold runs long enough to renew its lease, and then the
// test deletes its lock in Redis, so its next renewal finds it gone (a lost
// lease).
func TestDeployMetricsExported(t *testing.T) {
	t.Parallel()
	_, dqs := loadDashboard(t)
	_, aqs := loadAlertRules(t)
	qs := append(dqs, aqs...)
	names := referenced(t, qs)

	c := newCluster(t)
	c.start(1, "1s", `lease = "1s"
max_attempts = 3
timeout = "1m"
catchup = "latest"`,
		c.execTask("ok", "@every 1s", `exit 0`, ""),
		c.execTask("broken", "@every 1s", `exit 1`, "max_attempts = 1"),
		c.execTask("late", "@every 2s", `sleep 1.2; exit 1`, ""),
		c.execTask("hold", "@every 20s", `rec start; sleep 10; rec end`, ""))
	addr := c.reps[0].httpAddr(15 * time.Second)

	evs := c.ledger.await("hold to start", 30*time.Second, func(evs []event) bool { return len(find(evs, "start", 0)) > 0 })
	slot := find(evs, "start", 0)[0].Slot
	awaitScrape(t, []string{addr}, "a lease renewal of hold", 15*time.Second, func(s []families) bool {
		return sumOver(s, "slotd_lease_renewals_total", "task", "hold") > 0
	})
	if err := c.rdb.Del(t.Context(), stateKey("hold", slot)).Err(); err != nil {
		t.Fatal(err)
	}

	// The series the events above create; the run waits for them too.
	events := []struct{ metric, label, value string }{
		{"slotd_runs_total", "outcome", "success"},
		{"slotd_runs_total", "outcome", "failure"},
		{"slotd_runs_total", "outcome", "lease_lost"},
		{"slotd_slots_exhausted_total", "task", "broken"},
		{"slotd_slots_missed_total", "task", "late"},
		{"slotd_lease_losses_total", "task", "hold"},
	}
	var exp exported
	var missing []string
	var notYet []string
	deadline := time.Now().Add(20 * time.Second)
	for {
		mfs, err := scrapeMetrics(addr)
		if err != nil {
			t.Fatal(err)
		}
		exp = exportedFrom(mfs)
		missing = slices.DeleteFunc(slices.Clone(names), func(n string) bool { return exp.labels[n] != nil })
		notYet = nil
		for _, e := range events {
			if !slices.Contains(exp.values[e.metric][e.label], e.value) {
				notYet = append(notYet, fmt.Sprintf("%s{%s=%q}", e.metric, e.label, e.value))
			}
		}
		if len(missing) == 0 && len(notYet) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, n := range missing {
		var where []string
		for _, q := range qs {
			if nn, _ := parsePromQL(q.expr); slices.ContainsFunc(nn.refs, func(r promqlRef) bool { return r.metric == n }) {
				where = append(where, q.where)
			}
		}
		t.Errorf("%s is referenced by %s but the daemon does not export it", n, strings.Join(where, ", "))
	}
	if len(missing) > 0 {
		var have []string
		for n := range exp.labels {
			have = append(have, n)
		}
		slices.Sort(have)
		t.Fatalf("exported: %s", strings.Join(have, " "))
	}

	// Labels: each matcher's label exists on its metric, each grouping
	// label on some referenced metric; outcome and result values are ones
	// the daemon uses (README, Metrics).
	var outcomes []string
	for _, o := range stats.Outcomes {
		outcomes = append(outcomes, string(o))
	}
	known := map[string][]string{
		"outcome": outcomes,
		"result":  {"won", "held", "done", "exhausted", "early", "late", "error"},
	}
	for _, q := range qs {
		n, _ := parsePromQL(q.expr)
		var all []string
		for _, r := range n.refs {
			for _, l := range r.labels {
				if l != "__name__" && !slices.Contains(exp.labels[r.metric], l) {
					t.Errorf("%s: %s has no label %q (it has %v)", q.where, r.metric, l, exp.labels[r.metric])
				}
			}
			for l, v := range r.values {
				if vals, ok := known[l]; ok && !slices.Contains(vals, v) {
					t.Errorf("%s: %s{%s=%q}: the daemon never sets %s to %q (%v)", q.where, r.metric, l, v, l, v, vals)
				}
			}
			all = append(all, exp.labels[r.metric]...)
		}
		for _, l := range n.grouping {
			if !slices.Contains(all, l) {
				t.Errorf("%s: groups by %q, which none of its metrics has", q.where, l)
			}
		}
	}
	if len(notYet) > 0 {
		t.Errorf("not exported within 20s: %s: the test's tasks did not do what it expected", strings.Join(notYet, ", "))
	}
	t.Logf("%d metric names referenced, all exported: %s", len(names), strings.Join(names, " "))
	for _, task := range []string{"ok", "broken", "late", "hold"} {
		mfs, _ := scrapeMetrics(addr)
		f := families(mfs)
		t.Logf("%s: runs %v, missed %v, exhausted %v", task, f.samples("slotd_runs_total", "task", task),
			f.samples("slotd_slots_missed_total", "task", task), f.samples("slotd_slots_exhausted_total", "task", task))
	}
}
