package integration

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// A Redis that answers TIME but refuses writes (maxmemory reached under
// noeviction): the real daemon becomes unready with the refusal and its
// fix in /readyz, slotd_redis_up 0, the errors counted under kind="oom"
// and one log line naming the fix; once memory is freed it is ready and
// runs the task again. Started on a Redis whose maxmemory-policy is
// allkeys-lru, it also logs that at error level and exports the policy.
func TestReadyzRedisRefusesWrites(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := t.Context()
	if err := c.rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.rdb.ConfigSet(ctx, "maxmemory", "512mb").Err(); err != nil {
		t.Fatal(err)
	}
	c.start(1, "1s", `lease = "2s"
max_attempts = 3
timeout = "1m"
catchup = "none"`,
		c.execTask("tick", "@every 1s", `rec start; rec end`, ""))
	r := c.reps[0]
	addr := r.httpAddr(15 * time.Second)
	awaitStatus(t, addr, "/readyz", http.StatusOK, 15*time.Second)
	r.awaitLog("the eviction warning", 5*time.Second, func(l logRec) bool {
		return l.str("level") == "ERROR" && strings.Contains(l.msg(), "maxmemory-policy is not noeviction")
	})
	if v := mustScrape(t, []string{addr})[0].samples("slotd_redis_maxmemory_policy", "policy", "allkeys-lru"); len(v) != 1 || v[0] != 1 {
		t.Errorf(`slotd_redis_maxmemory_policy{policy="allkeys-lru"} = %v, want 1`, v)
	}
	c.ledger.await("a completed slot", 15*time.Second, func(evs []event) bool { return len(find(evs, "end", 0)) > 0 })

	// noeviction, and a limit below what Redis uses: every write is refused.
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1"}} {
		if err := c.rdb.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	refusedAt := time.Now()
	body, took := awaitStatus(t, addr, "/readyz", http.StatusServiceUnavailable, 15*time.Second)
	t.Logf("/readyz 503 %v after maxmemory was reached: %s", took, strings.TrimSpace(body))
	for _, want := range []string{"the store refuses writes", "redis OOM", "raise maxmemory or free memory"} {
		if !strings.Contains(body, want) {
			t.Errorf("/readyz body %q lacks %q", body, want)
		}
	}
	f := mustScrape(t, []string{addr})[0]
	if v := f.samples("slotd_redis_up"); len(v) != 1 || v[0] != 0 {
		t.Errorf("slotd_redis_up while Redis refuses writes = %v, want 0", v)
	}
	if v := f.samples("slotd_store_errors_total", "kind", "oom"); len(v) != 1 || v[0] < 1 {
		t.Errorf(`slotd_store_errors_total{kind="oom"} = %v, want >= 1`, v)
	}
	r.awaitLog("the fix in the log", 5*time.Second, func(l logRec) bool {
		return strings.Contains(l.msg(), "the store refuses writes: redis OOM — raise maxmemory or free memory; slotd cannot claim")
	})
	if !r.running() {
		t.Fatalf("slotd exited while Redis refused writes")
	}

	if err := c.rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	freedAt := time.Now()
	_, took = awaitStatus(t, addr, "/readyz", http.StatusOK, 15*time.Second)
	t.Logf("/readyz 200 again %v after memory was freed (refused for %v)", took, freedAt.Sub(refusedAt))
	c.ledger.await("a slot completed after memory was freed", 15*time.Second, func(evs []event) bool {
		return slices.ContainsFunc(find(evs, "end", 0), func(e event) bool { return e.At.After(freedAt) })
	})
	c.stopAll()
}
