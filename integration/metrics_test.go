package integration

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// families is one scrape of a replica's /metrics, by metric family name.
type families map[string]*dto.MetricFamily

// scrapeMetrics fetches and parses http://addr/metrics (text format).
func scrapeMetrics(addr string) (families, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	return mfs, nil
}

// mustScrape scrapes every address, failing the test if one does not answer.
func mustScrape(t *testing.T, addrs []string) []families {
	t.Helper()
	out := make([]families, len(addrs))
	for i, a := range addrs {
		f, err := scrapeMetrics(a)
		if err != nil {
			t.Fatalf("scrape %s: %v", a, err)
		}
		out[i] = f
	}
	return out
}

// matches reports whether m carries every label=value pair of match
// ("task", "ok", "outcome", "success", ...).
func matches(m *dto.Metric, match []string) bool {
	for i := 0; i+1 < len(match); i += 2 {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == match[i] && lp.GetValue() == match[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// value is a sample's value: a counter's, gauge's or untyped value, or a
// histogram's sample count.
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return math.NaN()
}

// samples lists the values of the series of name that match, in one scrape.
func (f families) samples(name string, match ...string) []float64 {
	var vs []float64
	for _, m := range f[name].GetMetric() {
		if matches(m, match) {
			vs = append(vs, value(m))
		}
	}
	return vs
}

// sumOver sums the matching series of name over every scrape (a counter
// summed over the replicas). No series at all sums to 0.
func sumOver(scrapes []families, name string, match ...string) float64 {
	total := 0.0
	for _, f := range scrapes {
		for _, v := range f.samples(name, match...) {
			total += v
		}
	}
	return total
}

// maxOver is the largest matching value over every scrape; false if no
// scrape has one.
func maxOver(scrapes []families, name string, match ...string) (float64, bool) {
	best, ok := math.Inf(-1), false
	for _, f := range scrapes {
		for _, v := range f.samples(name, match...) {
			best, ok = max(best, v), true
		}
	}
	return best, ok
}

// metricsTasks are the tasks of TestMetricsMatchLedger.
var metricsTasks = []string{"ok", "flaky", "broken"}

// settled reports whether a slot's events show it finished: ok and flaky
// end in a success, broken in its second failure (max_attempts 2).
func settled(task string, es []event) bool {
	if task == "broken" {
		return len(find(es, "fail", 0)) >= 2
	}
	return len(find(es, "end", 0)) >= 1
}

// byTaskSlot groups events by task, then slot id (tasks of one schedule
// share slot ids).
func byTaskSlot(evs []event) map[string]map[string][]event {
	m := map[string]map[string][]event{}
	for _, e := range evs {
		if m[e.Task] == nil {
			m[e.Task] = map[string][]event{}
		}
		m[e.Task][e.Slot] = append(m[e.Task][e.Slot], e)
	}
	return m
}

// check is one counter compared with its ledger count.
type check struct {
	what      string
	got, want float64
}

func (c check) ok() bool { return c.got == c.want }

// expectations derives, from a ledger, what the replicas' counters summed
// over the fleet must read once every attempt recorded in it has been
// accounted for, and reports whether every slot in the ledger is settled.
func expectations(t *testing.T, evs []event, scrapes []families) (checks []check, allSettled bool) {
	t.Helper()
	allSettled = true
	tasks := byTaskSlot(evs)
	add := func(what string, got, want float64) { checks = append(checks, check{what, got, want}) }
	for _, task := range metricsTasks {
		slots := tasks[task]
		var es []event
		for _, ses := range slots {
			es = append(es, ses...)
		}
		starts, ends, fails := len(find(es, "start", 0)), len(find(es, "end", 0)), len(find(es, "fail", 0))
		exhausted := 0
		var lastOK time.Time
		for id, ses := range slots {
			if !settled(task, ses) {
				allSettled = false
			}
			if task == "broken" && len(find(ses, "fail", 0)) >= 2 {
				exhausted++
			}
			if len(find(ses, "end", 0)) > 0 {
				if at := slotTime(t, id); at.After(lastOK) {
					lastOK = at
				}
			}
		}
		tl := []string{"task", task}
		runs := func(outcome string) float64 {
			return sumOver(scrapes, "slotd_runs_total", "task", task, "outcome", outcome)
		}
		add(task+": runs{outcome=success} = ledger ends", runs("success"), float64(ends))
		add(task+": runs{outcome=failure} = ledger fails", runs("failure"), float64(fails))
		add(task+": runs, all outcomes = ledger starts", sumOver(scrapes, "slotd_runs_total", tl...), float64(starts))
		add(task+": claims{result=won} = ledger starts", sumOver(scrapes, "slotd_claims_total", "task", task, "result", "won"), float64(starts))
		add(task+": task_duration_seconds count = ledger starts", sumOver(scrapes, "slotd_task_duration_seconds", tl...), float64(starts))
		add(task+": start_delay_seconds count = ledger starts", sumOver(scrapes, "slotd_start_delay_seconds", tl...), float64(starts))
		add(task+": slots_exhausted = ledger slots with 2 failures", sumOver(scrapes, "slotd_slots_exhausted_total", tl...), float64(exhausted))
		add(task+": slots_missed, max over replicas", func() float64 { v, _ := maxOver(scrapes, "slotd_slots_missed_total", tl...); return max(v, 0) }(), 0)
		add(task+": running_tasks", sumOver(scrapes, "slotd_running_tasks", tl...), 0)
		add(task+": lease_losses", sumOver(scrapes, "slotd_lease_losses_total", tl...), 0)
		last, ok := maxOver(scrapes, "slotd_last_success_timestamp_seconds", tl...)
		if !ok {
			last = 0
		}
		want := 0.0
		if !lastOK.IsZero() {
			want = float64(lastOK.Unix())
		}
		add(task+": last_success_timestamp_seconds, max over replicas = latest completed slot", last, want)
	}
	for i, f := range scrapes {
		up := f.samples("slotd_redis_up")
		add(fmt.Sprintf("r%d: redis_up", i+1), func() float64 {
			if len(up) != 1 {
				return math.NaN()
			}
			return up[0]
		}(), 1)
	}
	return checks, allSettled
}

// Three replicas run three tasks every 3s: ok succeeds; flaky fails its
// first attempt of each slot and succeeds its second; broken always fails,
// with max_attempts 2, so every slot ends exhausted. The counters, summed
// over the replicas' /metrics, must equal what the tasks wrote to the
// ledger: runs by outcome, won claims, histogram counts, exhausted slots (2
// failures each), no missed slot, no lease lost, nothing running between
// slots, the latest completed slot time, and Redis up everywhere.
//
// The scrapes happen while the replicas run. Attempts write the ledger
// before the daemon counts them, so the test reads the ledger, scrapes every
// replica, reads the ledger again, and accepts only a round in which the
// ledger did not move, every slot in it is settled, and every counter equals
// its ledger count — which happens between two slots, once the daemons have
// caught up. A daemon that over- or under-counts never gets there.
func TestMetricsMatchLedger(t *testing.T) {
	t.Parallel()
	const every = 3 * time.Second
	c := newCluster(t)
	c.start(3, "1s", `lease = "2s"
max_attempts = 3
timeout = "1m"
catchup = "none"`,
		c.execTask("ok", "@every 3s", `rec start; rec end`, ""),
		c.execTask("flaky", "@every 3s",
			`rec start; if [ "$SLOTD_ATTEMPT" = 1 ]; then rec fail; exit 1; fi; rec end`, ""),
		c.execTask("broken", "@every 3s", `rec start; rec fail; exit 1`, "max_attempts = 2"))
	var addrs []string
	for _, r := range c.reps {
		addrs = append(addrs, r.httpAddr(15*time.Second))
	}

	// Before any slot: the static series are there.
	awaitScrape(t, addrs, "redis_up 1 on every replica", 15*time.Second, func(s []families) bool {
		for _, f := range s {
			if v := f.samples("slotd_redis_up"); len(v) != 1 || v[0] != 1 {
				return false
			}
		}
		return true
	})
	for i, f := range mustScrape(t, addrs) {
		if v := f.samples("slotd_build_info"); len(v) != 1 || v[0] != 1 {
			t.Errorf("r%d: slotd_build_info = %v, want one series at 1", i+1, v)
		}
		for _, task := range metricsTasks {
			if v := f.samples("slotd_task_window_seconds", "task", task); len(v) != 1 || v[0] != every.Seconds() {
				t.Errorf("r%d: slotd_task_window_seconds{task=%q} = %v, want %v", i+1, task, v, every.Seconds())
			}
		}
		if v := f.samples("slotd_clock_skew_seconds"); len(v) != 1 || math.Abs(v[0]) > 0.1 {
			t.Errorf("r%d: slotd_clock_skew_seconds = %v, want one series near 0 (same host)", i+1, v)
		}
	}

	c.ledger.await("3 settled slots of each task", 35*time.Second, func(evs []event) bool {
		tasks := byTaskSlot(evs)
		for _, task := range metricsTasks {
			n := 0
			for _, es := range tasks[task] {
				if settled(task, es) {
					n++
				}
			}
			if n < 3 {
				return false
			}
		}
		return true
	})

	var checks []check
	var evs []event
	deadline := time.Now().Add(15 * time.Second)
	rounds := 0
	for {
		rounds++
		before := c.ledger.read()
		scrapes := mustScrape(t, addrs)
		evs = c.ledger.read()
		var allSettled bool
		checks, allSettled = expectations(t, evs, scrapes)
		if len(before) == len(evs) && allSettled && allEqual(checks) {
			break
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, ch := range checks {
				mark := "  "
				if !ch.ok() {
					mark = "≠ "
				}
				fmt.Fprintf(&b, "%s%s: got %v, want %v\n", mark, ch.what, ch.got, ch.want)
			}
			t.Fatalf("after %d rounds the counters never matched a quiet, settled ledger (ledger moved: %v, settled: %v); last round:\n%sledger:\n%s",
				rounds, len(before) != len(evs), allSettled, b.String(), dump(evs))
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The ledger itself is as scripted, so the equalities above say what
	// the test claims: one success per ok slot, one failure and one success
	// per flaky slot, exactly two failures per broken slot.
	perTask := byTaskSlot(evs)
	for _, task := range metricsTasks {
		slots := perTask[task]
		for _, id := range sortedSlots(slots) {
			es := slots[id]
			var want []string
			switch task {
			case "ok":
				want = []string{"start 1", "end 1"}
			case "flaky":
				want = []string{"start 1", "fail 1", "start 2", "end 2"}
			case "broken":
				want = []string{"start 1", "fail 1", "start 2", "fail 2"}
			}
			var got []string
			for _, e := range es {
				got = append(got, fmt.Sprintf("%s %d", e.Kind, e.Attempt))
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s slot %s: events %v, want %v:\n%s", task, id, got, want, dump(es))
			}
		}
		t.Logf("%s: %d slots", task, len(slots))
	}
	var b strings.Builder
	for _, ch := range checks {
		fmt.Fprintf(&b, "  %s: %v\n", ch.what, ch.want)
	}
	t.Logf("counters matched the ledger after %d scrape rounds:\n%s", rounds, b.String())
	final := mustScrape(t, addrs)
	for _, task := range metricsTasks {
		t.Logf("%s: claims held %v, done %v, exhausted %v (peers' views)", task,
			sumOver(final, "slotd_claims_total", "task", task, "result", "held"),
			sumOver(final, "slotd_claims_total", "task", task, "result", "done"),
			sumOver(final, "slotd_claims_total", "task", task, "result", "exhausted"))
	}
}

func allEqual(checks []check) bool {
	for _, ch := range checks {
		if !ch.ok() {
			return false
		}
	}
	return true
}

// awaitScrape scrapes every address until cond holds for the scrapes.
func awaitScrape(t *testing.T, addrs []string, what string, timeout time.Duration, cond func([]families) bool) []families {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := mustScrape(t, addrs)
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// awaitStatus polls GET http://addr+path until it answers want, and returns
// the body and how long that took.
func awaitStatus(t *testing.T, addr, path string, want int, timeout time.Duration) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	var code int
	var body string
	var err error
	for {
		code, body, err = httpGet(addr, path)
		if err == nil && code == want {
			return body, time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("GET %s: %d %q (err %v) for %v, want %d", path, code, strings.TrimSpace(body), err, timeout, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// /readyz follows Redis: 200 while it answers, 503 once the daemon's next
// store check fails after the redis-server is killed — while the process
// keeps running and /healthz stays 200 — and 200 again once a (new, empty)
// redis-server answers on the same port, after which the task runs again.
func TestReadyzFollowsRedis(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.start(1, "1s", `lease = "2s"
max_attempts = 3
timeout = "1m"
catchup = "none"`,
		c.execTask("tick", "@every 1s", `rec start; rec end`, ""))
	r := c.reps[0]
	addr := r.httpAddr(15 * time.Second)

	awaitStatus(t, addr, "/readyz", http.StatusOK, 15*time.Second)
	c.ledger.await("a completed slot", 15*time.Second, func(evs []event) bool { return len(find(evs, "end", 0)) > 0 })

	c.srv.Stop()
	stoppedAt := time.Now()
	body, took := awaitStatus(t, addr, "/readyz", http.StatusServiceUnavailable, 35*time.Second)
	t.Logf("/readyz 503 %v after redis-server was killed: %s", took, strings.TrimSpace(body))
	if !strings.Contains(body, "store unreachable") {
		t.Errorf("/readyz body %q, want the reason (store unreachable)", body)
	}
	if !r.running() {
		t.Fatalf("slotd exited while Redis was down")
	}
	if code, _, err := httpGet(addr, "/healthz"); err != nil || code != http.StatusOK {
		t.Errorf("/healthz while Redis is down: %d (err %v), want 200", code, err)
	}
	if v := mustScrape(t, []string{addr})[0].samples("slotd_redis_up"); len(v) != 1 || v[0] != 0 {
		t.Errorf("slotd_redis_up while Redis is down = %v, want 0", v)
	}
	if code, _, _ := httpGet(addr, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz flipped back to %d while Redis is still down", code)
	}

	c.srv.Restart()
	restartedAt := time.Now()
	_, took = awaitStatus(t, addr, "/readyz", http.StatusOK, 35*time.Second)
	t.Logf("/readyz 200 again %v after redis-server restarted (down for %v)", took, restartedAt.Sub(stoppedAt))
	if v := mustScrape(t, []string{addr})[0].samples("slotd_redis_up"); len(v) != 1 || v[0] != 1 {
		t.Errorf("slotd_redis_up after Redis came back = %v, want 1", v)
	}
	c.ledger.await("a slot completed after Redis came back", 15*time.Second, func(evs []event) bool {
		return slices.ContainsFunc(find(evs, "end", 0), func(e event) bool { return e.At.After(restartedAt) })
	})
	if !r.running() {
		t.Fatalf("slotd exited")
	}
	c.stopAll()
}
