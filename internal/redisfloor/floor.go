// Package redisfloor runs the floor of a slot on Redis 7.0: the least any
// slot protocol that keeps slotd's guarantees must ask of the server,
// priced in the benchmarks (lock/redislock BenchmarkRedisCPUFloor) and in
// the load tool's baseline (cmd/slotd-load -floor), so that slotd's own
// Redis CPU per slot is read against it on the same server, keyspace and
// machine.
//
// Redis 7.0 has no compare-and-set command, so a checked write is a
// script. The floor's claim takes the attempts counter and the state with
// SET NX PX (a first attempt's case); its completion checks the owner
// (GET), marks the slot done (SET PX) and appends the history entry
// (XADD NOMKSTREAM) — in fused calls of many slots, with no clock, window,
// cap or backoff check, no notice to peers and a one-number reply. The
// keys are slotd's own (state, counter, the task's stream), so the
// keyspace grows as a fleet's does.
package redisfloor

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/redislock"
	"github.com/slotd/slotd/scheduler/history"
)

// claimLua: per slot, KEYS state, attempts; ARGV owner prefix, lease ms,
// counter TTL ms. Returns how many slots it took.
const claimLua = `
local won = 0
for i = 1, #KEYS, 2 do
  local a = 3 * (i - 1) / 2
  local n = '1'
  if not redis.call('SET', KEYS[i + 1], '1', 'NX', 'PX', ARGV[a + 3]) then
    n = redis.call('INCR', KEYS[i + 1])
  end
  if redis.call('SET', KEYS[i], ARGV[a + 1] .. n, 'NX', 'PX', ARGV[a + 2]) then
    won = won + 1
  end
end
return won`

// completeLua: per slot, KEYS state, stream; ARGV owner, done value, done
// TTL ms, the entry's 9 values. Returns how many slots it marked.
const completeLua = `
local done = 0
for i = 1, #KEYS, 2 do
  local a = 12 * (i - 1) / 2
  if redis.call('GET', KEYS[i]) == ARGV[a + 1] then
    redis.call('SET', KEYS[i], ARGV[a + 2], 'PX', ARGV[a + 3])
    redis.call('XADD', KEYS[i + 1], 'NOMKSTREAM', 'MAXLEN', '~', '1000', '*',
      'slot', ARGV[a + 4], 'slot_time', ARGV[a + 5], 'attempt', ARGV[a + 6], 'token', ARGV[a + 7], 'replica', ARGV[a + 8],
      'outcome', ARGV[a + 9], 'started', ARGV[a + 10], 'duration_ms', ARGV[a + 11], 'error', ARGV[a + 12])
    done = done + 1
  end
end
return done`

var claimScript, completeScript = redis.NewScript(claimLua), redis.NewScript(completeLua)

// Slots is a batch of fresh slots, each of its own task's stream, with
// slotd's key names under prefix.
type Slots struct {
	prefix string
	slots  []lock.Slot
}

// Fresh returns n slots at time at, spread round robin over tasks tasks
// (task<i>), slot ids seq, seq+1, ...: a slot id is never reused.
func Fresh(prefix string, at time.Time, seq, n, tasks int) Slots {
	s := Slots{prefix: prefix, slots: make([]lock.Slot, n)}
	for i := range n {
		task := "task" + strconv.Itoa((seq+i)%max(tasks, 1))
		s.slots[i] = lock.Slot{Task: task, ID: strconv.Itoa(seq + i), Time: at, Deadline: at.Add(time.Hour)}
	}
	return s
}

// Lagged runs n fresh slots over tasks tasks, batch at a time: claim
// takes each batch, and complete completes it half a second of slots
// (tasks/2) later, as a fleet's completions come some hundred milliseconds
// after their claims, the keys no longer in the server's caches. It stops
// at the first error.
func Lagged(prefix string, n, tasks, batch int, claim, complete func(Slots) error) error {
	at := time.Now()
	lag := max(1, tasks/2/batch)
	var claimed []Slots
	for done := 0; done < n || len(claimed) > 0; done += batch {
		if done < n {
			s := Fresh(prefix, at, done, min(batch, n-done), tasks)
			if err := claim(s); err != nil {
				return err
			}
			claimed = append(claimed, s)
		}
		if len(claimed) > lag || done >= n {
			if err := complete(claimed[0]); err != nil {
				return err
			}
			claimed = claimed[1:]
		}
	}
	return nil
}

// Streams makes each task's history stream (the floor's XADD is
// NOMKSTREAM, as slotd's between TTL renewals), one entry each.
func Streams(ctx context.Context, c redis.Cmdable, prefix string, tasks int) error {
	p := c.Pipeline()
	for i := range tasks {
		p.XAdd(ctx, &redis.XAddArgs{Stream: redislock.HistoryKey(prefix, "task"+strconv.Itoa(i)), Values: []any{"slot", "0"}})
	}
	_, err := p.Exec(ctx)
	return err
}

// List is the slots.
func (s Slots) List() []lock.Slot { return s.slots }

// StateKeys are the slots' state keys.
func (s Slots) StateKeys() []string {
	out := make([]string, len(s.slots))
	for i, slot := range s.slots {
		out[i], _ = redislock.Keys(s.prefix, slot)
	}
	return out
}

// Claim claims every slot of s as replica "r", in one fused call.
func (s Slots) Claim(ctx context.Context, c redis.Scripter, lease, counterTTL time.Duration) error {
	keys, args := make([]string, 0, 2*len(s.slots)), make([]any, 0, 3*len(s.slots))
	for _, slot := range s.slots {
		state, attempts := redislock.Keys(s.prefix, slot)
		keys = append(keys, state, attempts)
		args = append(args, "run:r:", lease.Milliseconds(), counterTTL.Milliseconds())
	}
	return runAll(ctx, c, claimScript, keys, args, len(s.slots), "claim: won")
}

// runAll runs script over keys and args, which answers how many of its n
// slots it did; what names the step and the count in the error.
func runAll(ctx context.Context, c redis.Scripter, script *redis.Script, keys []string, args []any, n int, what string) error {
	did, err := script.Run(ctx, c, keys, args...).Int()
	if err == nil && did != n {
		err = fmt.Errorf("%d of %d", did, n)
	}
	if err != nil {
		return fmt.Errorf("floor %s: %w", what, err)
	}
	return nil
}

// Complete completes every slot of s (claimed by Claim), each with its
// history entry, in one fused call.
func (s Slots) Complete(ctx context.Context, c redis.Scripter, doneTTL time.Duration) error {
	keys, args := make([]string, 0, 2*len(s.slots)), make([]any, 0, 12*len(s.slots))
	for _, slot := range s.slots {
		state, _ := redislock.Keys(s.prefix, slot)
		keys = append(keys, state, redislock.HistoryKey(s.prefix, slot.Task))
		e := Entry(slot)
		args = append(args, "run:r:1", "done:r:1:1767225600012", doneTTL.Milliseconds())
		for j := 1; j < len(e); j += 2 {
			args = append(args, e[j])
		}
	}
	return runAll(ctx, c, completeScript, keys, args, len(s.slots), "completion: marked done")
}

// Entry is the history entry of slot's first attempt succeeding, as the
// history writes its fields (name, value, ...), output and backfilled
// left out as slotd leaves them out when empty.
func Entry(slot lock.Slot) []any {
	e := history.Entry{Slot: slot.ID, SlotTime: slot.Time, Attempt: 1, Token: lock.Token(slot.Time, 1), Replica: "r",
		Outcome: "success", Started: slot.Time.Add(3 * time.Millisecond), Duration: time.Millisecond}
	return []any{"slot", e.Slot, "slot_time", e.SlotTime.UTC().Format(time.RFC3339), "attempt", strconv.Itoa(e.Attempt),
		"token", strconv.FormatInt(e.Token, 10), "replica", e.Replica, "outcome", string(e.Outcome),
		"started", e.Started.UTC().Format(time.RFC3339Nano), "duration_ms", strconv.FormatInt(e.Duration.Milliseconds(), 10), "error", e.Error}
}
