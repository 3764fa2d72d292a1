package redislock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// BenchmarkRedisCPUOneKey prices, on Redis's own CPU, a slot layout slotd
// does not use: ONE key per slot, holding "<attempts>|<lease deadline,
// unix ms>|<state>", with the attempts TTL as its TTL, so that a claim is a
// GET and a SET and a completion a GET and a SET (the current layout
// spends 5 and 4 commands: a state key whose TTL is the lease, beside an
// attempts counter and a rerun base). The scripts below check what
// claim.lua and complete.lua check (window, state, cap, owner) and publish
// one notice per call as those do; they are a measurement, not a store.
// It answers whether issue 18's second target (≤ 13 µs of Redis CPU for a
// whole slot: claim, completion and the history append) is in reach of a
// key-layout change:
//
//	go test -run '^$' -bench 'RedisCPU' -benchtime 20000x ./lock/
//
// Its "slot" line adds the three, each measured alone on fresh slots.
func BenchmarkRedisCPUOneKey(b *testing.B) {
	rdb, _, p := benchEnv(b)
	ctx := context.Background()
	claim := redis.NewScript(oneKeyClaim)
	complete := redis.NewScript(oneKeyComplete)
	const batch = 256
	measure := func(b *testing.B, op func(first, n int)) float64 {
		b.Helper()
		before := serverCPU(b, rdb)
		b.ResetTimer()
		for done := 0; done < b.N; done += batch {
			op(done, min(batch, b.N-done))
		}
		b.StopTimer()
		us := (serverCPU(b, rdb) - before) / float64(b.N) * 1e6
		b.ReportMetric(us, "redis-µs/slot")
		return us
	}
	lease, ttl := strconv.FormatInt(p.Lease.Milliseconds(), 10), strconv.FormatInt(p.DoneTTL.Milliseconds(), 10)
	claimAll := func(b *testing.B, keys []string) {
		now := time.Now()
		args := make([]any, 0, 6*len(keys))
		for range keys {
			args = append(args, "r#1", lease, "3", now.Add(-time.Second).UnixMilli(), now.Add(time.Hour).UnixMilli(), ttl)
		}
		res, err := claim.Run(ctx, rdb, keys, append(args, "slotd:taken")...).Slice()
		if err != nil {
			b.Fatal(err)
		}
		for i, r := range res {
			if r != "won" {
				b.Fatalf("claim %s: %v", keys[i], r)
			}
		}
	}
	var claimUS, completeUS, historyUS float64
	b.Run("claim", func(b *testing.B) {
		claimUS = measure(b, func(_, n int) { claimAll(b, freshKeys(n)) })
	})
	b.Run("complete", func(b *testing.B) {
		keys := freshKeys(b.N)
		for i := 0; i < len(keys); i += batch {
			claimAll(b, keys[i:min(i+batch, len(keys))])
		}
		completeUS = measure(b, func(first, n int) {
			args := make([]any, 0, 2*n)
			for range n {
				args = append(args, "r#1", ttl)
			}
			res, err := complete.Run(ctx, rdb, keys[first:first+n], append(args, "slotd:done")...).Slice()
			if err != nil {
				b.Fatal(err)
			}
			for i, r := range res {
				if r != int64(1) {
					b.Fatalf("complete %s: %v", keys[first+i], r)
				}
			}
		})
	})
	b.Run("history", func(b *testing.B) {
		// As History (history.go) appends: one XADD NOMKSTREAM
		// per slot, capped ~1000, the entry's nine fields, 100 tasks'
		// streams, pipelined in a transaction.
		for i := range 100 {
			rdb.XAdd(ctx, &redis.XAddArgs{Stream: "hist:" + strconv.Itoa(i), Values: []any{"k", "v"}})
		}
		now := time.Now().UTC()
		historyUS = measure(b, func(first, n int) {
			pipe := rdb.TxPipeline()
			for i := first; i < first+n; i++ {
				pipe.XAdd(ctx, &redis.XAddArgs{
					Stream: "hist:" + strconv.Itoa(i%100), NoMkStream: true, MaxLen: 1000, Approx: true,
					Values: []any{
						"slot", now.Format("20060102150405"), "slot_time", now.Format(time.RFC3339),
						"attempt", "1", "token", strconv.FormatInt(now.Unix()*1000+1, 10), "replica", "r1",
						"outcome", "success", "started", now.Format(time.RFC3339Nano), "duration_ms", "3", "error", "",
					},
				})
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("slot", func(b *testing.B) {
		b.ReportMetric(claimUS+completeUS+historyUS, "redis-µs/slot")
	})
}

// oneKeyClaim: KEYS are the slots' keys; per slot 6 ARGV (owner, lease ms,
// max attempts, earliest ms, deadline ms, attempts TTL ms), then the taken
// channel. Returns "won", "held", "done", "exhausted", "early" or "late"
// per slot.
const oneKeyClaim = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out, won = {}, {}
for i = 1, #KEYS do
  local a = 6 * (i - 1)
  local v = redis.call('GET', KEYS[i])
  local n, until_, state = 0, 0, ''
  if v then
    local sn, su, st = string.match(v, '^(%d+)|(%d+)|(.*)$')
    n, until_, state = tonumber(sn), tonumber(su), st
  end
  local r
  if string.sub(state, 1, 5) == 'done:' then
    r = 'done'
  elseif string.sub(state, 1, 4) == 'run:' and until_ > now then
    r = 'held'
  elseif now < tonumber(ARGV[a + 4]) then
    r = 'early'
  elseif now >= tonumber(ARGV[a + 5]) then
    r = 'late'
  elseif n >= tonumber(ARGV[a + 3]) then
    r = 'exhausted'
  else
    n = n + 1
    redis.call('SET', KEYS[i], n .. '|' .. (now + tonumber(ARGV[a + 2])) .. '|run:' .. ARGV[a + 1], 'PX', ARGV[a + 6])
    won[#won + 1] = KEYS[i]
    r = 'won'
  end
  out[i] = r
end
if #won > 0 then
  redis.call('PUBLISH', ARGV[#ARGV], 'taken\n' .. table.concat(won, '\n'))
end
return out`

// oneKeyComplete: KEYS are the slots' keys; per slot 2 ARGV (owner, done
// TTL ms), then the done channel. Returns 1 (done by the owner) or 0.
const oneKeyComplete = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out, done = {}, {}
for i = 1, #KEYS do
  local a = 2 * (i - 1)
  local v = redis.call('GET', KEYS[i])
  out[i] = 0
  if v then
    local sn, su, st = string.match(v, '^(%d+)|(%d+)|(.*)$')
    if st == 'run:' .. ARGV[a + 1] and tonumber(su) > now then
      redis.call('SET', KEYS[i], sn .. '|0|done:' .. ARGV[a + 1] .. ':' .. sn .. ':' .. now, 'PX', ARGV[a + 2])
      done[#done + 1] = KEYS[i]
      out[i] = 1
    end
  end
end
if #done > 0 then
  redis.call('PUBLISH', ARGV[#ARGV], table.concat(done, '\n'))
end
return out`
