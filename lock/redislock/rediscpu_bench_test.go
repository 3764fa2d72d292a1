package redislock_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler/history"
)

// BenchmarkRedisCPU measures what a slot's state changes cost Redis itself:
// the server's CPU (INFO cpu, user + sys) per slot, next to a pipelined raw
// SET NX PX of a fresh key on the same server in the same run, the least
// a lock costs. Slots go through the store as the engine sends them in a
// burst, ClaimMany of 256 fresh slots at a time (fused into EVALSHAs by the
// batcher), then their completions, concurrently:
//
//	go test -run '^$' -bench RedisCPU -benchtime 20000x ./lock/
//
// redis-µs/slot is the figure issue 18's second target reads (≤ 13 µs for
// a whole slot: claim, completion and the history append the engine adds);
// ratio-to-raw is it over the raw SET NX PX's.
func BenchmarkRedisCPU(b *testing.B) {
	rdb, r, p := benchEnv(b)
	ctx := context.Background()
	const batch = 256
	run := func(b *testing.B, op func(n int)) {
		b.Helper()
		for done := 0; done < b.N; done += batch {
			n := min(batch, b.N-done)
			op(n)
		}
	}
	measure := func(b *testing.B, op func(n int)) float64 {
		b.Helper()
		before := serverCPU(b, rdb)
		b.ResetTimer()
		run(b, op)
		b.StopTimer()
		us := (serverCPU(b, rdb) - before) / float64(b.N) * 1e6
		b.ReportMetric(us, "redis-µs/slot")
		return us
	}
	var raw float64
	b.Run("raw-setnx", func(b *testing.B) {
		raw = measure(b, func(n int) {
			pipe := rdb.Pipeline()
			for _, k := range freshKeys(n) {
				pipe.SetNX(ctx, k, "owner", p.Lease)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		})
	})
	claimed := map[int][]lock.Slot{}
	claim := func(b *testing.B, n int) []lock.Slot {
		now := time.Now()
		slots := freshSlots(now, n)
		reqs := make([]lock.ClaimRequest, n)
		for i, s := range slots {
			reqs[i] = lock.ClaimRequest{Slot: s, Owner: "r", Policy: p}
		}
		r.ClaimMany(ctx, reqs, func(i int, rep lock.ClaimReply) {
			if rep.Err != nil || rep.Claim.Result != lock.Won {
				b.Errorf("claim %s: %+v", slots[i], rep)
			}
		})
		return slots
	}
	b.Run("claim", func(b *testing.B) {
		us := measure(b, func(n int) { claimed[len(claimed)] = claim(b, n) })
		b.ReportMetric(us/raw, "ratio-to-raw")
	})
	b.Run("complete", func(b *testing.B) {
		var slots []lock.Slot
		for done := 0; done < b.N; done += batch {
			slots = append(slots, claim(b, min(batch, b.N-done))...)
		}
		next := 0
		us := measure(b, func(n int) {
			errs := make(chan error, n)
			for _, s := range slots[next : next+n] {
				go func() { errs <- r.Complete(ctx, s, lock.Owner{ID: "r", Attempt: 1}, p.DoneTTL) }()
			}
			for range n {
				if err := <-errs; err != nil {
					b.Error(err)
				}
			}
			next += n
		})
		b.ReportMetric(us/raw, "ratio-to-raw")
	})
	// The history entry of a success: appended apart (a Cluster's path,
	// and every server's before the completion carried it), or by the
	// completion's own script (one server: Open, CompleteRecorded).
	hist := redislock.NewHistory(rdb, "slotd", time.Hour)
	defer hist.Close()
	rs, rh := redislock.Open(rdb, redislock.Config{Prefix: "slotd", HistoryTTL: time.Hour})
	defer rs.Close()
	defer rh.Close()
	successOf := func(s lock.Slot) history.Entry {
		return history.Entry{Slot: s.ID, SlotTime: s.Time, Attempt: 1, Token: lock.Token(s.Time, 1), Replica: "r",
			Outcome: "success", Started: s.Time.Add(3 * time.Millisecond), Duration: time.Millisecond}
	}
	concurrently := func(b *testing.B, slots []lock.Slot, f func(lock.Slot) error) {
		errs := make(chan error, len(slots))
		for _, s := range slots {
			go func() { errs <- f(s) }()
		}
		for range slots {
			if err := <-errs; err != nil {
				b.Error(err)
			}
		}
	}
	b.Run("append", func(b *testing.B) {
		now := time.Now()
		us := measure(b, func(n int) {
			concurrently(b, freshSlots(now, n), func(s lock.Slot) error { return hist.Append(ctx, s.Task, successOf(s)) })
		})
		b.ReportMetric(us/raw, "ratio-to-raw")
	})
	b.Run("complete-recorded", func(b *testing.B) {
		var slots []lock.Slot
		for done := 0; done < b.N; done += batch {
			slots = append(slots, claim(b, min(batch, b.N-done))...)
		}
		next := 0
		us := measure(b, func(n int) {
			concurrently(b, slots[next:next+n], func(s lock.Slot) error {
				recorded, err := rh.CompleteRecorded(ctx, rs, s, lock.Owner{ID: "r", Attempt: 1}, p.DoneTTL, successOf(s))
				if err == nil && !recorded {
					err = fmt.Errorf("complete %s: not recorded", s)
				}
				return err
			})
			next += n
		})
		b.ReportMetric(us/raw, "ratio-to-raw")
	})
	// The least a slot can cost Redis: three plain commands, pipelined,
	// checking nothing: SET NX PX (a claim), SET XX PX (a completion),
	// XADD (its history entry, as the history writes it).
	b.Run("plain-slot", func(b *testing.B) {
		now := time.Now()
		us := measure(b, func(n int) {
			pipe := rdb.Pipeline()
			for _, s := range freshSlots(now, n) {
				state, _ := redislock.Keys("slotd", s)
				pipe.SetArgs(ctx, state, "run:r:1", redis.SetArgs{Mode: "NX", TTL: p.Lease})
				pipe.SetArgs(ctx, state, "done:r:1:1767225600012", redis.SetArgs{Mode: "XX", TTL: p.DoneTTL})
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: redislock.HistoryKey("slotd", s.Task), MaxLen: history.MaxLen, Approx: true,
					Values: plainEntry(successOf(s))})
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		})
		b.ReportMetric(us/raw, "ratio-to-raw")
	})
}

// plainEntry is e's fields as the history writes them.
func plainEntry(e history.Entry) []any {
	return []any{"slot", e.Slot, "slot_time", e.SlotTime.UTC().Format(time.RFC3339), "attempt", strconv.Itoa(e.Attempt),
		"token", strconv.FormatInt(e.Token, 10), "replica", e.Replica, "outcome", string(e.Outcome),
		"started", e.Started.UTC().Format(time.RFC3339Nano), "duration_ms", strconv.FormatInt(e.Duration.Milliseconds(), 10), "error", e.Error}
}

// serverCPU is Redis's own CPU time so far, in seconds.
func serverCPU(b *testing.B, rdb *redis.Client) float64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\r\n") {
		name, v, ok := strings.Cut(line, ":")
		if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("INFO cpu: %q: %v", line, err)
			}
			sum += f
		}
	}
	return sum
}

// BenchmarkRedisCPUFloor prices, on Redis's own CPU, the least any slot
// protocol that keeps slotd's guarantees must ask of Redis 7.0 (which has
// no compare-and-set command: a conditional write is a script): a claim
// that takes the attempts counter (SET NX PX, the first attempt's case)
// and the state (SET NX PX, naming the attempt), and a completion that
// checks the state is the caller's (GET), marks it done (SET PX) and
// appends the entry (XADD NOMKSTREAM) — in 256-slot fused calls, with no
// clock, window, cap or backoff check, no notice to peers and a one-number
// reply. slotd's own claim and recorded completion (BenchmarkRedisCPU) do
// all of that and more; this is what no design can go below:
//
//	go test -run '^$' -bench 'RedisCPU(Floor)?$' -benchtime 20000x ./lock/redislock/
func BenchmarkRedisCPUFloor(b *testing.B) {
	rdb, _, p := benchEnv(b)
	ctx := context.Background()
	claim, complete := redis.NewScript(floorClaim), redis.NewScript(floorComplete)
	const batch = 256
	lease, ttl := p.Lease.Milliseconds(), p.DoneTTL.Milliseconds()
	stream := redislock.HistoryKey("slotd", "bench")
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"slot", "0"}}).Err(); err != nil {
		b.Fatal(err)
	}
	batches := func(b *testing.B) [][]lock.Slot {
		now := time.Now()
		var all [][]lock.Slot
		for done := 0; done < b.N; done += batch {
			all = append(all, freshSlots(now, min(batch, b.N-done)))
		}
		return all
	}
	measure := func(b *testing.B, all [][]lock.Slot, op func(slots []lock.Slot)) float64 {
		b.Helper()
		before := serverCPU(b, rdb)
		b.ResetTimer()
		for _, slots := range all {
			op(slots)
		}
		b.StopTimer()
		return (serverCPU(b, rdb) - before) / float64(b.N) * 1e6
	}
	var raw float64
	b.Run("raw-setnx", func(b *testing.B) {
		raw = measure(b, batches(b), func(slots []lock.Slot) {
			pipe := rdb.Pipeline()
			for _, s := range slots {
				state, _ := redislock.Keys("slotd", s)
				pipe.SetNX(ctx, state, "owner", p.Lease)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		})
		b.ReportMetric(raw, "redis-µs/slot")
	})
	claimAll := func(b *testing.B, slots []lock.Slot) {
		keys, args := make([]string, 0, 2*len(slots)), make([]any, 0, 3*len(slots))
		for _, s := range slots {
			state, attempts := redislock.Keys("slotd", s)
			keys = append(keys, state, attempts)
			args = append(args, "run:r:", lease, ttl)
		}
		won, err := claim.Run(ctx, rdb, keys, args...).Int()
		if err != nil || won != len(slots) {
			b.Fatalf("floor claim: %d won of %d, %v", won, len(slots), err)
		}
	}
	b.Run("claim", func(b *testing.B) {
		us := measure(b, batches(b), func(slots []lock.Slot) { claimAll(b, slots) })
		b.ReportMetric(us, "redis-µs/slot")
		b.ReportMetric(us/raw, "ratio-to-raw")
	})
	b.Run("complete-recorded", func(b *testing.B) {
		all := batches(b)
		for _, slots := range all {
			claimAll(b, slots)
		}
		us := measure(b, all, func(slots []lock.Slot) {
			keys, args := make([]string, 0, 2*len(slots)), make([]any, 0, 12*len(slots))
			for _, s := range slots {
				state, _ := redislock.Keys("slotd", s)
				keys = append(keys, state, stream)
				e := plainEntry(history.Entry{Slot: s.ID, SlotTime: s.Time, Attempt: 1, Token: lock.Token(s.Time, 1), Replica: "r",
					Outcome: "success", Started: s.Time, Duration: time.Millisecond})
				args = append(args, "run:r:1", "done:r:1:1767225600012", ttl)
				for i := 1; i < len(e); i += 2 {
					args = append(args, e[i])
				}
			}
			n, err := complete.Run(ctx, rdb, keys, args...).Int()
			if err != nil || n != len(slots) {
				b.Fatalf("floor completion: %d of %d, %v", n, len(slots), err)
			}
		})
		b.ReportMetric(us, "redis-µs/slot")
		b.ReportMetric(us/raw, "ratio-to-raw")
	})
}

// floorClaim: per slot, KEYS state, attempts; ARGV owner prefix, lease ms,
// counter TTL ms. Returns how many slots it took.
const floorClaim = `
local won = 0
for i = 1, #KEYS, 2 do
  local a = 3 * (i - 1) / 2
  local n = 1
  if not redis.call('SET', KEYS[i + 1], '1', 'NX', 'PX', ARGV[a + 3]) then
    n = redis.call('INCR', KEYS[i + 1])
  end
  if redis.call('SET', KEYS[i], ARGV[a + 1] .. n, 'NX', 'PX', ARGV[a + 2]) then
    won = won + 1
  end
end
return won`

// floorComplete: per slot, KEYS state, stream; ARGV owner, done value,
// done TTL ms, the entry's 9 values. Returns how many slots it marked.
const floorComplete = `
local done = 0
for i = 1, #KEYS, 2 do
  local a = 12 * (i - 1) / 2
  if redis.call('GET', KEYS[i]) == ARGV[a + 1] then
    redis.call('SET', KEYS[i], ARGV[a + 2], 'PX', ARGV[a + 3])
    redis.call('XADD', KEYS[i + 1], 'NOMKSTREAM', 'MAXLEN', '~', 1000, '*',
      'slot', ARGV[a + 4], 'slot_time', ARGV[a + 5], 'attempt', ARGV[a + 6], 'token', ARGV[a + 7], 'replica', ARGV[a + 8],
      'outcome', ARGV[a + 9], 'started', ARGV[a + 10], 'duration_ms', ARGV[a + 11], 'error', ARGV[a + 12])
    done = done + 1
  end
end
return done`
