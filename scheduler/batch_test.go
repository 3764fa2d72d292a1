package scheduler_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler"
	"github.com/slotd/slotd/tasks"
)

// tripLog is a go-redis hook that records every round trip a client makes:
// a pipeline, or one command alone, as the list of its commands, a script
// call named by its file ("claim.lua"), once per slot it carries (the lock
// package fuses concurrent calls of one slot script into one EVALSHA). A
// new connection's handshake is not recorded; dials are counted.
type tripLog struct {
	scripts map[string]string // sha1 -> file name
	sources []string          // the scripts

	addr string // the server loggedStores started

	mu    sync.Mutex
	on    bool
	trips [][]string
	dials int
}

func newTripLog(t *testing.T) *tripLog {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "lock", "redislock", "*.lua"))
	if err != nil || len(files) == 0 {
		t.Fatalf("lock scripts: %v %v", files, err)
	}
	l := &tripLog{scripts: map[string]string{}}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha1.Sum(src)
		l.scripts[hex.EncodeToString(sum[:])] = filepath.Base(f)
		l.sources = append(l.sources, string(src))
	}
	return l
}

func (l *tripLog) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		l.mu.Lock()
		l.dials++
		l.mu.Unlock()
		return next(ctx, network, addr)
	}
}

func (l *tripLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.record([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (l *tripLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		l.record(cmds)
		return next(ctx, cmds)
	}
}

func (l *tripLog) record(cmds []redis.Cmder) {
	if n := cmds[0].Name(); n == "hello" || n == "client" {
		return
	}
	trip := make([]string, 0, len(cmds))
	for _, c := range cmds {
		args := c.Args()
		name := strings.ToLower(fmt.Sprint(args[0]))
		slots := 1
		switch {
		case (name == "evalsha" || name == "evalsha_ro") && len(args) > 2:
			if s, ok := l.scripts[fmt.Sprint(args[1])]; ok {
				name = s
				keys, _ := strconv.Atoi(fmt.Sprint(args[2]))
				if per := slotKeys[s]; per > 0 { // not announce.lua
					slots = max(keys/per, 1)
				}
			}
		case name == "script" && len(args) > 1:
			name += " " + strings.ToLower(fmt.Sprint(args[1]))
		}
		for range slots {
			trip = append(trip, name)
		}
	}
	l.mu.Lock()
	if l.on {
		l.trips = append(l.trips, trip)
	}
	l.mu.Unlock()
}

// slotKeys is how many keys one slot adds to a call of a slot script.
var slotKeys = map[string]int{"claim.lua": 3, "complete.lua": 2, "renew.lua": 1, "release.lua": 1, "probe.lua": 1}

// start clears the log and starts recording.
func (l *tripLog) start() {
	l.mu.Lock()
	l.on, l.trips, l.dials = true, nil, 0
	l.mu.Unlock()
}

// count returns how many calls of cmd (slots, for a slot script) were
// sent, and in how many round trips.
func (l *tripLog) count(cmd string) (calls, trips int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, trip := range l.trips {
		n := 0
		for _, c := range trip {
			if c == cmd {
				n++
			}
		}
		calls += n
		if n > 0 {
			trips++
		}
	}
	return calls, trips
}

// names returns every command recorded, with how often it was sent.
func (l *tripLog) names() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := map[string]int{}
	for _, trip := range l.trips {
		for _, c := range trip {
			m[c]++
		}
	}
	return m
}

// loggedStore is a Redis store on a new server whose client records its
// round trips in l, subscribed and with the scripts loaded (as a replica's
// first calls would leave them) before l records.
func loggedStore(t *testing.T, l *tripLog) *redislock.Store {
	t.Helper()
	return loggedStores(t, l, 1)[0]
}

// loggedStores is n stores, as n replicas would have, on one new server
// and one client that records in l.
func loggedStores(t *testing.T, l *tripLog, n int) []*redislock.Store {
	t.Helper()
	srv := redistest.Start(t)
	l.addr = srv.Addr
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, PoolSize: 16})
	rdb.AddHook(l)
	t.Cleanup(func() { rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, src := range l.sources {
		if err := rdb.ScriptLoad(ctx, src).Err(); err != nil {
			t.Fatal(err)
		}
	}
	stores := make([]*redislock.Store, n)
	for i := range stores {
		r := redislock.New(rdb, "slotd")
		if err := r.Subscribe(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		stores[i] = r
	}
	return stores
}

// manyTasks returns n tasks on one schedule, each running job.
func manyTasks(t *testing.T, n int, spec string, job tasks.Task, edit func(*scheduler.Task)) []scheduler.Task {
	ts := make([]scheduler.Task, n)
	for i := range ts {
		ts[i] = testTask(t, fmt.Sprintf("t%04d", i), spec, job, edit)
	}
	return ts
}

// soon is a daily schedule whose next fire time is 2 to 3 seconds away.
func soon() string {
	at := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second).UTC()
	return fmt.Sprintf("%d %d %d * * *", at.Second(), at.Minute(), at.Hour())
}

// 1000 tasks due at the same second on one replica: each slot goroutine
// claims at once, so the batcher coalesces the claims, and the completions
// after them, into pipelines.
func TestBurstOfDueSlotsIsPipelined(t *testing.T) {
	l := newTripLog(t)
	store := loggedStore(t, l)
	led := newLedger()
	const n = 1000
	l.start()
	r := startReplica(t, "r1", store, time.Second, nil, scheduler.WithClockCheck(time.Hour))
	// The tasks come once the replica runs, due 2 to 3 s later: a replica
	// slow to start under load would otherwise find their slot time past
	// and catch none of them up.
	awaitStarted(t, r)
	// A lease long enough that no renewal is missed while the race
	// detector and a loaded machine slow a thousand attempts: a lost lease
	// reruns its slot (CI: 68 of 1,000 ran twice on 3 s leases), and this
	// test counts round trips, not leases.
	long := func(t *scheduler.Task) { t.Lease = 15 * time.Second }
	if _, err := r.sched.Reload(context.Background(), manyTasks(t, n, soon(), led.job(ok), long)); err != nil {
		t.Fatal(err)
	}
	led.await(t, "every task to run once", 90*time.Second, func(rs []record) bool {
		done := 0
		for _, r := range rs {
			if r.done {
				done++
			}
		}
		return done >= n
	})
	claims, claimTrips := l.count("claim.lua")
	completes, completeTrips := l.count("complete.lua")
	t.Logf("%d claims in %d round trips, %d completes in %d; all commands: %v", claims, claimTrips, completes, completeTrips, l.names())
	// One lock.Burst: the 1000 claims are queued at once and leave in
	// ceil(1000/256) = 4 pipelines; a claim retried after an error would
	// add its own round trip, hence the looser bound.
	if claims != n || claimTrips > n/50 {
		t.Errorf("%d claims of %d slots in %d round trips, want %d claims in at most %d", claims, n, claimTrips, n, n/50)
	}
	for slot, runs := range bySlot(led.snapshot()) {
		if len(runs) != n || runs[0].run.Attempt != 1 {
			t.Errorf("slot %s: %d runs, first attempt %d; want one per task, attempt 1", slot, len(runs), runs[0].run.Attempt)
		}
	}
}

// 200 leases held at once: on each watchdog tick their renewals leave in
// a few pipelines, not one round trip each.
func TestRenewalsOfManyLeasesArePipelined(t *testing.T) {
	l := newTripLog(t)
	store := loggedStore(t, l)
	led := newLedger()
	const n = 200
	release := make(chan struct{})
	hold := led.job(func(ctx context.Context, _ tasks.Run) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return ctx.Err()
	})
	ts := manyTasks(t, n, soon(), hold, func(t *scheduler.Task) { t.Lease = 900 * time.Millisecond })
	startReplica(t, "r1", store, time.Second, ts, scheduler.WithClockCheck(time.Hour))
	led.await(t, "every task to start", 60*time.Second, func(rs []record) bool { return len(rs) >= n })
	l.start()
	deadline := time.Now().Add(60 * time.Second)
	for calls, _ := l.count("renew.lua"); calls < 5*n; calls, _ = l.count("renew.lua") {
		if time.Now().After(deadline) {
			t.Fatalf("%d renewals in 60s", calls)
		}
		time.Sleep(10 * time.Millisecond)
	}
	calls, trips := l.count("renew.lua")
	close(release)
	t.Logf("%d renewals in %d round trips; all commands: %v", calls, trips, l.names())
	// The watchdogs wake on one grid instant per tick; the first renewals
	// go alone (4 flights), the rest queue behind them and leave in
	// pipelines. How many depends on how fast the woken goroutines queue,
	// so the bound is loose: a round trip per renewal would be 5 times it.
	if trips > calls/5 {
		t.Errorf("%d renewals of %d leases took %d round trips, want at most %d", calls, n, trips, calls/5)
	}
}

// Between fires a replica sends only its periodic clock check (TIME):
// the slots it settled wait for their deadline without polling Redis.
func TestIdleReplicaSendsOnlyClockChecks(t *testing.T) {
	l := newTripLog(t)
	store := loggedStore(t, l)
	led := newLedger()
	const n = 20
	ts := manyTasks(t, n, soon(), led.job(ok), nil)
	l.start()
	startReplica(t, "r1", store, time.Second, ts, scheduler.WithClockCheck(500*time.Millisecond))
	deadline := time.Now().Add(60 * time.Second)
	for calls, _ := l.count("complete.lua"); calls < n; calls, _ = l.count("complete.lua") {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d slots completed in 60s; commands: %v", calls, n, l.names())
		}
		time.Sleep(10 * time.Millisecond)
	}
	l.start()
	time.Sleep(3 * time.Second) // the idle period observed, not a wait for an event
	names := l.names()
	t.Logf("commands in 3s idle: %v", names)
	// Each clock check also renews the replica's presence (announce.lua,
	// live.lua) and the fleet's first-start record (SET NX, PEXPIRE, GET): no more
	// often than the clock is read.
	// The operator controls' epoch is one more GET per check.
	fleet := map[string]int{"announce.lua": 1, "live.lua": 1, "probe.lua": 1, "set": 1, "pexpire": 1, "get": 2}
	// The 3 s window may open between a check's TIME and its presence
	// writes: one check's share more than the TIMEs counted.
	for cmd := range names {
		if cmd != "time" && cmd != "ping" && !(fleet[cmd] > 0 && names[cmd] <= fleet[cmd]*(names["time"]+1)) { // the clock check, its write probe and presence
			t.Errorf("idle replica sent %s (%d times); all commands: %v", cmd, names[cmd], names)
		}
	}
	if names["time"] == 0 {
		t.Errorf("no clock check in 3s with a check every 500ms: %v", names)
	}
}

// Replicas started together leave each slot to its preferred claimant
// from the first fire (watchFleet reads the live set as it starts), so a
// slot is claimed once, and by the other replica only where its deferral
// ran out before the claimant's claim landed. Such a loser claims once
// more when the lease it saw runs out, finds the slot done and settles
// (Redis sends no done notices since 2026-11-30); with done notices it
// settled on the notice, so the thundering herd of re-claims a lease
// later that a burst of ten thousand slots used to bring stays away
// either way. Until watchFleet read the set at start, the replica that
// announced first missed its peer's announcement, claimed the peer's
// share at once, and this test failed one run in three (102 claims).
func TestLosersSettleOnCompletionWithoutReclaiming(t *testing.T) {
	l := newTripLog(t)
	stores := loggedStores(t, l, 2)
	led := newLedger()
	const n = 50
	lease := time.Second
	ts := manyTasks(t, n, soon(), led.job(ok), func(t *scheduler.Task) { t.Lease = lease })
	l.start()
	for i, s := range stores {
		startReplica(t, fmt.Sprintf("r%d", i+1), s, time.Second, ts, scheduler.WithClockCheck(time.Hour))
	}
	deadline := time.Now().Add(60 * time.Second)
	for calls, _ := l.count("complete.lua"); calls < n; calls, _ = l.count("complete.lua") {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d slots completed in 60s; commands: %v", calls, n, l.names())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The observed period: the holders' leases, and the handoff jitter
	// after them, are over; a loser that had not settled claims by then.
	time.Sleep(lease + 500*time.Millisecond)
	// Each slot is claimed by its preferred claimant, and by the other
	// replica only if its deferral ran out first.
	if claims, _ := l.count("claim.lua"); claims < n || claims > 2*n {
		t.Errorf("%d claims of %d slots by 2 replicas, want %d to %d (one each at most); commands: %v", claims, n, n, 2*n, l.names())
	}
	for slot, runs := range bySlot(led.snapshot()) {
		if len(runs) != n {
			t.Errorf("slot %s: %d runs, want %d", slot, len(runs), n)
		}
	}
}

// Slots claimed together (one ClaimMany) still wake their watchers on a
// release: every first attempt fails, and every second attempt is taken by
// the peer that lost the race, woken by the release. Nothing else could
// start it within the test: the replica that failed waits a minute before
// it claims again (WithHandoff), and the peer would otherwise wait out the
// 30 s lease it saw.
func TestBurstReleasesWakePeers(t *testing.T) {
	stores := loggedStores(t, newTripLog(t), 2)
	led := newLedger()
	const n = 40
	fail := errors.New("first attempt fails")
	ts := manyTasks(t, n, soon(), led.job(func(_ context.Context, r tasks.Run) error {
		if r.Attempt == 1 {
			return fail
		}
		return nil
	}), func(t *scheduler.Task) { t.Lease = 30 * time.Second })
	for i, s := range stores {
		startReplica(t, fmt.Sprintf("r%d", i+1), s, time.Second, ts, scheduler.WithClockCheck(time.Hour),
			scheduler.WithHandoff(time.Minute))
	}
	led.await(t, "every slot to succeed on its second attempt", 20*time.Second, func(rs []record) bool {
		ok := 0
		for _, r := range rs {
			if r.done && r.err == nil && r.run.Attempt == 2 {
				ok++
			}
		}
		return ok == n
	})
	first := map[string]string{} // task -> replica of attempt 1
	for _, r := range led.snapshot() {
		if r.run.Attempt == 1 {
			first[r.run.Task] = r.run.Replica
		}
	}
	peer := 0
	for _, r := range led.snapshot() {
		if r.run.Attempt == 2 && r.run.Replica != first[r.run.Task] {
			peer++
		}
	}
	if peer != n {
		t.Errorf("%d of %d second attempts taken by the woken peer, want all", peer, n)
	}
	for slot, runs := range bySlot(led.snapshot()) {
		if len(runs) != 2*n {
			t.Errorf("slot %s: %d runs, want %d (two per task)", slot, len(runs), 2*n)
		}
	}
}

// Three replicas that see one another in the fleet's live set: each slot
// is claimed by its preferred claimant, and the others, told by its Taken
// notice, do not claim it too (before, every replica claimed every slot).
func TestPreferredClaimantClaimsAlone(t *testing.T) {
	l := newTripLog(t)
	stores := loggedStores(t, l, 3)
	led := newLedger()
	const n = 60
	// Taken notices, which claim.lua would publish itself, are counted as
	// a subscriber sees them: there must be none (redislock.claimArgs),
	// the deferring replicas read the slots they left instead.
	var notices atomic.Int64
	sub := redis.NewClient(&redis.Options{Addr: l.addr}).Subscribe(context.Background(), "slotd:done")
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	go func() {
		for m := range sub.Channel() {
			if strings.HasPrefix(m.Payload, "taken\n") {
				notices.Add(1)
			}
		}
	}()
	reps := seeingReplicas(t, stores)
	l.start()
	reloadAll(t, reps, manyTasks(t, n, soon(), led.job(ok), nil))
	led.await(t, "every slot done", 60*time.Second, func(rs []record) bool {
		done := 0
		for _, r := range rs {
			if r.done {
				done++
			}
		}
		return done >= n
	})
	// The losers would have claimed by now: their wait is bounded by
	// deferLimit (2 s for a daily task).
	time.Sleep(2500 * time.Millisecond)
	claims, _ := l.count("claim.lua")
	t.Logf("%d claims, %d Taken notices for %d slots; commands: %v", claims, notices.Load(), n, l.names())
	// On a quiet machine about one each (60-70); on a loaded one a
	// deferring replica whose own claims were answered before the
	// preferred claimant's notice came claims too (100 at a load of 20).
	// Without the preferred claimant every replica claims every slot: 180.
	if claims < n || claims >= 2*n {
		t.Errorf("%d claims of %d slots by 3 replicas, want fewer than two each (every replica claiming every slot: %d)", claims, n, 3*n)
	}
	if notices.Load() != 0 {
		t.Errorf("%d Taken notices sent, want none", notices.Load())
	}
	for slot, runs := range bySlot(led.snapshot()) {
		if len(runs) != n {
			t.Errorf("slot %s: %d runs, want %d", slot, len(runs), n)
		}
	}
}

// A replica in the live set that never claims (dead, or paused, since its
// last announce) is the preferred claimant of a share of the slots: its
// peers claim them anyway once they are not told the slots were taken,
// within deferLimit, and each runs once.
func TestDeadPreferredClaimantsSlotsStillRun(t *testing.T) {
	l := newTripLog(t)
	stores := loggedStores(t, l, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := stores[0].Announce(ctx, "ghost", "ghost-instance", time.Minute); err != nil {
		t.Fatal(err)
	}
	led := newLedger()
	const n = 30
	// Caught up if the replicas start after the fire time (a slow -race run).
	ts := manyTasks(t, n, later(5*time.Second), led.job(ok), nil)
	for i, s := range stores {
		startReplica(t, fmt.Sprintf("r%d", i+1), s, time.Second, ts, scheduler.WithClockCheck(200*time.Millisecond))
	}
	rs := led.await(t, "every slot done", 60*time.Second, func(rs []record) bool {
		done := 0
		for _, r := range rs {
			if r.done {
				done++
			}
		}
		return done >= n
	})
	for _, r := range rs {
		if r.run.Attempt != 1 {
			t.Errorf("task %s: attempt %d ran, want attempt 1 only", r.run.Task, r.run.Attempt)
		}
		// deferLimit for a daily slot, plus a margin for a loaded machine.
		if d := r.started.Sub(r.run.SlotTime); d > 2*time.Second+time.Second {
			t.Errorf("task %s started %v after its slot time, want within the 2 s deferral limit", r.run.Task, d)
		}
	}
	if len(rs) != n {
		t.Errorf("%d runs of %d slots, want one each", len(rs), n)
	}
}

// awaitStarted waits for r's first clock check, which Run makes before it
// fires anything.
func awaitStarted(t *testing.T, r *replica) {
	t.Helper()
	await(t, "replica "+r.name+"'s first clock check", 60*time.Second, func() bool {
		ok, _ := r.sched.Healthy()
		return ok
	})
}

// later is a daily schedule whose next fire time is d to d+1 s away.
func later(d time.Duration) string {
	at := time.Now().Add(d).Truncate(time.Second).Add(time.Second).UTC()
	return fmt.Sprintf("%d %d %d * * *", at.Second(), at.Minute(), at.Hour())
}
