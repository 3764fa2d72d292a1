package redislock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/redisx"
	"github.com/slotd/slotd/lock/internal/schema"
)

var (
	//go:embed claim.lua
	claimLua    string
	claimScript = redis.NewScript(claimLua)
	//go:embed renew.lua
	renewLua    string
	renewScript = redis.NewScript(renewLua)
	//go:embed complete.lua
	completeLua    string
	completeScript = redis.NewScript(completeLua)
	// completeRecordScript is complete.lua for completions that bring
	// their history entry (record.go): another shape of arguments, fused
	// apart, so that the others do not carry an entry's padding.
	completeRecordScript = redis.NewScript(completeLua)
	//go:embed release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)
	//go:embed rerun.lua
	rerunLua    string
	rerunScript = redis.NewScript(rerunLua)
)

// Client is the part of go-redis that the store needs; a *redis.Client,
// *redis.ClusterClient or sentinel failover client all satisfy it.
type Client = redisx.Client

// Redis is the slot protocol on a Redis server: each state change is one Lua
// script that checks ownership before it writes. Claims, renewals,
// completions and releases made concurrently are pipelined together (see
// batcher), so a burst of due slots costs a few round trips, not one each.
type Store struct {
	rdb     Client
	prefix  string
	channel string   // releases and reruns
	doneCh  string   // the live set's changes (live.lua); from slotd before 2026-11-30 also completions and won claims
	batch   *batcher // claims, renewals, completions and releases

	sub *redisx.Subscription // releases, reruns, the live set's changes; started by the first Watch

	ack replicasAck // WithMinReplicasAck; zero: no WAIT
	// defers: Announce lists the live set, so that replicas defer to a
	// slot's preferred claimant (not under WithMinReplicasAck, nor on a
	// Redlock node).
	defers bool

	doubt doubts // claims sent whose reply was lost (doubt.go)
}

// NewRedis returns the slot protocol on rdb, with keys under prefix.
// It does no I/O; Close stops the pub/sub subscription Watch may start.
//
// rdb must be built with ContextTimeoutEnabled: otherwise go-redis ignores
// the deadlines this package puts on each call and waits out its
// ReadTimeout, and a lease watchdog blocked on a frozen Redis cannot cancel
// its task before the lease runs out.
func New(rdb Client, prefix string, opts ...Option) *Store {
	r := &Store{rdb: rdb, prefix: prefix, channel: prefix + ":released", doneCh: prefix + ":done", batch: newBatcher(rdb)}
	r.sub = &redisx.Subscription{Clients: []redisx.Client{rdb}, Channels: []string{r.channel, r.doneCh}, DoneCh: r.doneCh, Owner: "store"}
	for _, o := range opts {
		o(r)
	}
	// Replicas defer to a slot's preferred claimant among the live set
	// (Fleet.Announce), except under WithMinReplicasAck, whose claims
	// bypass the batcher and its batched reads.
	r.defers = r.ack.n == 0
	return r
}

// Claim implements Store.
func (r *Store) Claim(ctx context.Context, slot lock.Slot, replica string, p lock.Policy) (lock.Claim, error) {
	if r.ack.n > 0 {
		return r.claimAcked(ctx, slot, replica, p)
	}
	for try := 0; ; try++ {
		keys, args := r.claimArgs(slot, replica, p)
		sent := time.Now()
		c, err, again := r.claimReply(r.batch.run(ctx, claimScript, keys, args...), slot, replica, sent)
		if !again || try > 0 {
			return c, err
		}
	}
}

// claimReply decodes the reply to claim.lua for owner's claim of slot,
// sent at sent, and records it (doubt.go): again reports a claim found
// held by its own lost claim, to send once more at once, asking for it.
func (r *Store) claimReply(cmd *redis.Cmd, slot lock.Slot, owner string, sent time.Time) (c lock.Claim, err error, again bool) {
	state, attempts := Keys(r.prefix, slot)
	res, err := cmd.Result()
	if err == nil {
		c, err = decodeClaim(res)
		if err != nil {
			err = fmt.Errorf("lock: claim %s (keys %s, %s): %w", slot, state, attempts, err)
		}
	} else {
		err = fmt.Errorf("lock: claim %s: %w", slot, err)
	}
	again = r.doubt.answered(state, owner, c, err)
	if err != nil {
		return lock.Claim{}, redisErr(err), false
	}
	c.Sent = sent
	return c, nil, again
}

// claimArgs are claim.lua's keys (state, attempts, base) and arguments.
// A won claim is announced to nobody: the replicas that defer to a slot's
// preferred claimant read the slots they left it in batches (Peek,
// tallies) and hear its releases, and a Taken notice per won key cost
// every replica a message to decode and Redis the PUBLISH. It counts
// the claim in flight, which claimReply must answer, and takes the slot's
// record of a claim in doubt, if any, into the arguments (doubt.go).
func (r *Store) claimArgs(slot lock.Slot, replica string, p lock.Policy) ([]string, []any) {
	state, attempts := Keys(r.prefix, slot)
	inDoubt := r.doubt.send(state, replica, slot.Deadline)
	return []string{state, attempts, schema.BaseKey(state)}, []any{
		claimant(replica, p),
		slot.Time.Add(-p.Tolerance).UnixMilli(),
		slot.Deadline.UnixMilli(),
		inDoubt,
	}
}

// claimant is claim.lua's first argument of a slot, the replica and its
// policy in one string, "<lease ms>:<max attempts>:<done TTL ms>:<replica>",
// which the script reads once a call: the slots of a call mostly share it,
// and every argument costs Redis about 1,000 instructions to parse and
// hand to Lua.
func claimant(replica string, p lock.Policy) string {
	return joined(replica, p.Lease.Milliseconds(), int64(p.MaxAttempts), p.DoneTTL.Milliseconds())
}

// joined is ns in decimal and last, each followed by the next after a
// colon: the one argument that stands for several in claim.lua and
// complete.lua.
func joined(last string, ns ...int64) string {
	b := make([]byte, 0, 20*len(ns)+len(last))
	for _, n := range ns {
		b = append(strconv.AppendInt(b, n, 10), ':')
	}
	return string(append(b, last...))
}

// decodeClaim turns claim.lua's reply to one slot into a Claim.
func decodeClaim(reply any) (lock.Claim, error) {
	if v, ok := reply.(int64); ok { // won, base 0: now * 1000 + attempt
		n, now := v%1000, v/1000
		if v <= 0 || n == 0 {
			return lock.Claim{}, fmt.Errorf("unexpected reply %v", reply)
		}
		return lock.Claim{Result: lock.Won, Attempt: int(n), Now: time.UnixMilli(now).UTC()}, nil
	}
	res, _ := reply.([]any)
	if len(res) != 6 {
		return lock.Claim{}, fmt.Errorf("unexpected reply %v", res)
	}
	kind, _ := res[0].(string)
	n, _ := res[1].(int64)
	ms, _ := res[2].(int64)
	now, _ := res[3].(int64)
	value, _ := res[4].(string)
	base, _ := res[5].(int64)
	c := lock.Claim{Attempt: int(n), Base: int(base), Wait: time.Duration(ms) * time.Millisecond, Now: time.UnixMilli(now).UTC()}
	switch kind {
	case "won":
		c.Result = lock.Won
		c.Wait = 0
	case "held", "done":
		st, err := schema.ParseState(value)
		if err != nil {
			return lock.Claim{}, err
		}
		c.Result, c.Holder, c.Instance, c.Attempt = lock.Held, st.Holder, st.Instance, st.Attempt
		if kind == "done" {
			c.Result = lock.Done
		}
	case "exhausted":
		c.Result = lock.Exhausted
	case "early":
		c.Result, c.Backoff = lock.Early, value != ""
	case "late":
		c.Result, c.Backoff = lock.Late, value != ""
	case "foreign":
		return lock.Claim{}, fmt.Errorf("%w: %q", lock.ErrForeign, value)
	default:
		return lock.Claim{}, fmt.Errorf("unexpected reply %v", reply)
	}
	return c, nil
}

// Renew implements Store.
func (r *Store) Renew(ctx context.Context, slot lock.Slot, owner lock.Owner, lease time.Duration) error {
	state, _ := Keys(r.prefix, slot)
	return r.compare(ctx, "renew", slot, owner, renewScript, []string{state}, schema.Run(owner), lease.Milliseconds())
}

// Complete implements Store.
func (r *Store) Complete(ctx context.Context, slot lock.Slot, owner lock.Owner, doneTTL time.Duration) error {
	if r.ack.n > 0 {
		return r.completeAcked(ctx, slot, owner, doneTTL)
	}
	keys, args := r.completeArgs(slot, owner, doneTTL, nil)
	return r.compare(ctx, "complete", slot, owner, completeScript, keys, args...)
}

// completeArgs are complete.lua's keys and arguments for owner's
// completion of slot, with rec appended in the same step unless it is nil.
func (r *Store) completeArgs(slot lock.Slot, owner lock.Owner, doneTTL time.Duration, rec *record) ([]string, []any) {
	state, _ := Keys(r.prefix, slot)
	keys := []string{state, state}
	if rec == nil {
		return keys, []any{schema.Run(owner), doneTTL.Milliseconds()}
	}
	keys[1] = rec.stream
	renew := "0"
	if rec.renew {
		renew = "1"
	}
	// "<done TTL>:<maxlen>:<stream TTL>:<renew>", one argument (complete.lua)
	shared := joined(renew, doneTTL.Milliseconds(), rec.maxLen, rec.ttl.Milliseconds())
	args := make([]any, 0, 2+len(entryNames))
	args = append(args, schema.Run(owner), shared)
	return keys, append(args, rec.values[:]...)
}

// Release implements Store.
func (r *Store) Release(ctx context.Context, slot lock.Slot, owner lock.Owner) error {
	return r.ReleaseAfter(ctx, slot, owner, 0)
}

// ReleaseAfter implements lock.Store: release.lua with the backoff,
// whose end the script counts from the server's TIME.
func (r *Store) ReleaseAfter(ctx context.Context, slot lock.Slot, owner lock.Owner, delay time.Duration) error {
	state, _ := Keys(r.prefix, slot)
	return r.compare(ctx, "release", slot, owner, releaseScript, []string{state}, schema.Run(owner), r.channel, backoffMillis(delay))
}

// backoffMillis is a backoff as release.lua takes it: whole milliseconds,
// at least one if any (a shorter one must not read as none).
func backoffMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return max(d.Milliseconds(), 1)
}

// compare runs one of the owner-checked scripts, which answer 1 or 0.
func (r *Store) compare(ctx context.Context, op string, slot lock.Slot, owner lock.Owner, s *redis.Script, keys []string, args ...any) error {
	n, err := r.batch.run(ctx, s, keys, args...).Int()
	if err != nil {
		return redisErr(fmt.Errorf("lock: %s %s attempt %d: %w", op, slot, owner.Attempt, err))
	}
	if n != 1 {
		return fmt.Errorf("lock: %s %s attempt %d: %w", op, slot, owner.Attempt, lock.ErrNotHeld)
	}
	return nil
}

// Rerun implements Store.
func (r *Store) Rerun(ctx context.Context, slot lock.Slot, force bool) (lock.Rerun, error) {
	state, attempts := Keys(r.prefix, slot)
	f := "0"
	if force {
		f = "1"
	}
	res, err := rerunScript.Run(ctx, r.rdb, []string{state, attempts, schema.BaseKey(state)}, f, r.channel).Slice()
	if err == nil && len(res) != 4 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		return lock.Rerun{}, redisErr(fmt.Errorf("lock: rerun %s: %w", slot, err))
	}
	kind, _ := res[0].(string)
	prev, _ := res[1].(string)
	counted, _ := res[2].(string)
	n, _ := res[3].(int64)
	out := lock.Rerun{Previous: prev}
	out.Attempts, _ = strconv.Atoi(counted)
	switch kind {
	case "cleared":
		out.Cleared, out.Woken = true, n
	case "running", "foreign":
		out.Refused, out.TTL = kind, time.Duration(n)*time.Millisecond
	default:
		return lock.Rerun{}, fmt.Errorf("lock: rerun %s: unexpected reply %v", slot, res)
	}
	return out, nil
}

// States implements Store: every slot's keys in one pipelined round trip.
func (r *Store) States(ctx context.Context, slots []lock.Slot) ([]lock.State, error) {
	type reads struct {
		get, cnt *redis.StringCmd
		ttl      *redis.DurationCmd
	}
	rs := make([]reads, len(slots))
	p := r.rdb.Pipeline()
	for i, slot := range slots {
		state, attempts := Keys(r.prefix, slot)
		rs[i] = reads{get: p.Get(ctx, state), ttl: p.PTTL(ctx, state), cnt: p.Get(ctx, attempts)}
	}
	// A failed round trip fails every command; a key of another type
	// fails only its own (the server refuses it), and reads as foreign.
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !refused(err) {
		return nil, redisErr(fmt.Errorf("lock: state of %d slots: %w", len(slots), err))
	}
	out := make([]lock.State, len(slots))
	var errs []error
	for i, rd := range rs {
		v, verr := rd.get.Result()
		c, cerr := rd.cnt.Result()
		for _, err := range []error{verr, cerr, rd.ttl.Err()} {
			if err != nil && !errors.Is(err, redis.Nil) && !refused(err) {
				return nil, redisErr(fmt.Errorf("lock: state of %d slots: %w", len(slots), err))
			}
		}
		if refused(verr) || refused(cerr) {
			state, attempts := Keys(r.prefix, slots[i])
			refusal := cerr // not a value: the server's refusal to read one
			if refused(verr) {
				refusal = verr
			}
			msg := fmt.Sprintf("<%v>", refusal)
			out[i] = lock.State{Status: "foreign", Value: msg}
			errs = append(errs, fmt.Errorf("lock: state %s (keys %s, %s): %w: %s", slots[i], state, attempts, lock.ErrForeign, msg))
			continue
		}
		st, err := schema.DecodeState(v, verr == nil, c, cerr == nil, rd.ttl.Val())
		if err != nil {
			errs = append(errs, redisErr(fmt.Errorf("lock: state %s: %w", slots[i], err)))
		}
		out[i] = st
	}
	return out, errors.Join(errs...)
}

// refused reports whether err is the server's refusal of one command
// because its key is of another type: that key's fault alone, not the
// server's (LOADING, OOM) or the round trip's.
func refused(err error) bool { return redis.HasErrorPrefix(err, "WRONGTYPE") }

// Time implements Store with the server's TIME. On a Redis Cluster one node
// answers; the claim script reads the clock of the shard it runs on.
func (r *Store) Time(ctx context.Context) (time.Time, error) {
	t, err := r.rdb.Time(ctx).Result()
	if err != nil {
		return time.Time{}, redisErr(fmt.Errorf("lock: time: %w", err))
	}
	return t.UTC(), nil
}

// Watch implements Store. All watches share one pub/sub subscription to the
// prefix's release channel; a notification lost while the subscription
// reconnects costs only promptness, since watchers also wake when the
// holder's lease runs out.
func (r *Store) Watch(slot lock.Slot) *lock.Watch { return r.watchInto(slot, nil) }

// watchInto is Watch, with the signals sent to relay when it is not nil.
func (r *Store) watchInto(slot lock.Slot, relay *lock.Watch) *lock.Watch {
	key, _ := Keys(r.prefix, slot)
	return r.watchKey(key, relay)
}

// watchKey watches the messages naming key on the store's channels.
func (r *Store) watchKey(key string, relay *lock.Watch) *lock.Watch {
	var w *lock.Watch
	w = lock.NewWatch(func() { r.sub.Remove(key, w) })
	if relay != nil { // a Redlock node's watch: only releases reach the Redlock's
		w.OnChange(func(c lock.Change) {
			if c == lock.Released {
				relay.Notify(lock.Released)
			}
		})
	}
	r.sub.Add(key, w)
	r.sub.Start()
	return w
}

// WatchReleases implements lock.Peeker over the subscription
// Watch shares, which it starts.
func (r *Store) WatchReleases(f func(task, id string)) (stop func()) {
	prefix := r.prefix
	stop = r.sub.OnRelease(func(key string) {
		if task, id, ok := schema.SlotOf(prefix, key); ok {
			f(task, id)
		}
	})
	r.sub.Start()
	return stop
}

// Subscribe starts the release subscription and waits until Redis has
// confirmed it, so that a release published after it returns is not missed.
// Watch starts the subscription by itself; calling Subscribe first only
// closes the window in which the very first notification could be missed.
func (r *Store) Subscribe(ctx context.Context) error { return r.sub.Confirm(ctx) }

// Close stops the release subscription and waits for its goroutine and for
// the pipelines in flight. It does not close the go-redis client, which the
// caller owns.
func (r *Store) Close() error {
	defer r.batch.close()
	return r.sub.Close()
}
