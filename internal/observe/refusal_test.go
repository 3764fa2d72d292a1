package observe_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/tasks"
)

// syncBuffer is a log sink that tests read while the daemon writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// liveDaemon is a running scheduler on a real Redis behind its HTTP
// handler, with a task due every second, checking the store every 100ms.
type liveDaemon struct {
	t   *testing.T
	srv *httptest.Server
	log *syncBuffer
}

func startLive(t *testing.T, opt *redis.Options) *liveDaemon {
	t.Helper()
	opt.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opt)
	store := redislock.New(rdb, "slotd")
	task := statusTask(t, "tick", "@every 1s", 3, time.Minute)
	task.Job = tasks.TaskFunc(func(context.Context) error { return nil })
	logs := &syncBuffer{}
	sched := scheduler.New([]scheduler.Task{task}, store, scheduler.WithReplica("r1"),
		scheduler.WithClockCheck(100*time.Millisecond),
		scheduler.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	srv := httptest.NewServer(observe.Handler(observe.Daemon{Scheduler: sched, Store: store, Replica: "r1"}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = sched.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Close()
		store.Close()
		rdb.Close()
	})
	return &liveDaemon{t: t, srv: srv, log: logs}
}

func (d *liveDaemon) get(path string) (int, string) {
	d.t.Helper()
	res, err := http.Get(d.srv.URL + path)
	if err != nil {
		d.t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// awaitReady waits until /readyz answers want with a body holding
// has, and returns the body.
func (d *liveDaemon) awaitReady(want int, has, what string) string {
	d.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := d.get("/readyz")
		if code == want && strings.Contains(body, has) {
			return body
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%s: /readyz = %d %q after 10s, want %d; log:\n%s", what, code, body, want, d.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// metric returns the value of the series named exactly as line starts
// ("slotd_redis_up", `slotd_store_errors_total{kind="oom"}`).
func (d *liveDaemon) metric(series string) float64 {
	d.t.Helper()
	_, body := d.get("/metrics")
	fams, err := parseTextFamilies(body)
	if err != nil {
		d.t.Fatalf("/metrics does not parse: %v", err)
	}
	name, label, _ := strings.Cut(strings.TrimSuffix(series, "}"), "{")
	fam, ok := fams[name]
	if !ok {
		d.t.Fatalf("no %s in /metrics", name)
	}
	for _, m := range fam.GetMetric() {
		if label == "" {
			return m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
		for _, lp := range m.GetLabel() {
			if lp.GetName()+`="`+lp.GetValue()+`"` == label {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	d.t.Fatalf("no series %s in /metrics", series)
	return 0
}

// refused checks what a replica facing a refusal of kind shows: /readyz
// 503 naming the store, its code and the fix, slotd_redis_up 0, the error
// counted under kind, and a log line naming the fix.
func (d *liveDaemon) refused(kind lock.ErrorKind, code, fix string) {
	d.t.Helper()
	body := d.awaitReady(http.StatusServiceUnavailable, "the store refuses writes", code)
	for _, want := range []string{"the store refuses writes (redis " + code, fix, "cannot claim"} {
		if !strings.Contains(body, want) {
			d.t.Errorf("/readyz body %q lacks %q", body, want)
		}
	}
	if up := d.metric("slotd_redis_up"); up != 0 {
		d.t.Errorf("slotd_redis_up = %v while Redis refuses writes, want 0", up)
	}
	if n := d.metric(`slotd_store_errors_total{kind="` + kind.String() + `"}`); n < 1 {
		d.t.Errorf(`slotd_store_errors_total{kind=%q} = %v, want >= 1`, kind, n)
	}
	line := "the store refuses writes: redis " + code + " — " + fix // the fix, in part
	if !strings.Contains(d.log.String(), line) {
		d.t.Errorf("log lacks %q:\n%s", line, d.log.String())
	}
}

// recovered checks that the replica is ready again, says so, and has
// claimed since.
func (d *liveDaemon) recovered(code string) {
	d.t.Helper()
	d.awaitReady(http.StatusOK, "ready", "after fixing "+code)
	if up := d.metric("slotd_redis_up"); up != 1 {
		d.t.Errorf("slotd_redis_up = %v after the fix, want 1", up)
	}
	deadline := time.Now().Add(5 * time.Second)
	for d.metric(`slotd_runs_total{outcome="success"}`) < 1 {
		if time.Now().After(deadline) {
			d.t.Fatalf("no successful attempt 5s after the fix; log:\n%s", d.log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(d.log.String(), "the store takes writes again") {
		d.t.Errorf("no log of the recovery:\n%s", d.log.String())
	}
}

// parseTextFamilies parses a scrape as Prometheus would.
func parseTextFamilies(s string) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	return p.TextToMetricFamilies(strings.NewReader(s))
}

func configSet(t *testing.T, rdb *redis.Client, key, value string) {
	t.Helper()
	if err := rdb.ConfigSet(context.Background(), key, value).Err(); err != nil {
		t.Fatalf("CONFIG SET %s %s: %v", key, value, err)
	}
}

// A Redis at maxmemory (noeviction) answers TIME but refuses every claim:
// the replica is not ready until memory is freed.
func TestReadinessRedisOOM(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client()
	d := startLive(t, &redis.Options{Addr: srv.Addr})
	d.awaitReady(http.StatusOK, "ready", "fresh")
	for i := range 100 {
		admin.Set(context.Background(), "filler:"+string(rune('a'+i%26))+strings.Repeat("x", i), strings.Repeat("v", 1000), 0)
	}
	configSet(t, admin, "maxmemory", "1")
	d.refused(lock.KindOOM, "OOM", "raise maxmemory or free memory")
	configSet(t, admin, "maxmemory", "0")
	d.recovered("OOM")
}

// An ACL user without rights on the prefix's keys answers TIME but is
// refused every claim (NOPERM).
func TestReadinessRedisNoPerm(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client()
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "slotd", "on", ">s3cret", "~other:*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	d := startLive(t, &redis.Options{Addr: srv.Addr, Username: "slotd", Password: "s3cret"})
	d.refused(lock.KindNoPerm, "NOPERM", "grant the Redis ACL user slotd's commands")
	if _, body := d.get("/readyz"); strings.Contains(body, "s3cret") {
		t.Errorf("/readyz quotes the password: %q", body)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "slotd", "~slotd:*").Err(); err != nil {
		t.Fatal(err)
	}
	d.recovered("NOPERM")
}

// A URL pointing at a read-only replica answers TIME but is refused every
// claim (READONLY); promoting it makes the replica ready.
func TestReadinessRedisReadOnly(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	d := startLive(t, &redis.Options{Addr: replica.Addr})
	d.refused(lock.KindReadOnly, "READONLY", "point slotd at the master")
	if err := replica.Client().Do(context.Background(), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	d.recovered("READONLY")
}
