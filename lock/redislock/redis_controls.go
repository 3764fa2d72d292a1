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
	"github.com/slotd/slotd/lock/internal/schema"
)

// The operator controls (lock.Controls) on Redis.
//
// Keys (prefix "slotd"; each per-task key has the hash tag {<task>}, so one
// script touches one task's keys on one Cluster shard; a slot's keys have
// the tag {<task>:<slot id>}, so no script touches both):
//
//	slotd:triggers:{<task>}          pending triggers: unix seconds, scored by the trigger's unix ms (TTL TriggerTTL)
//	slotd:trigger-keys:{<task>}      idempotency keys: each request's key, scored by the unix second of the trigger it started (TTL TriggerTTL, at most MaxTriggerKeys)
//	slotd:paused:{<task>}            "paused" or "resumed" (TTL PauseTTL, renewed by every live replica)
//	slotd:paused:{<task>}:config     the config's paused value last applied, "paused" or "resumed" (as the state)
//	slotd:running:{<task>}           "<slot id> run:<owner>:<attempt>": the attempt that runs the task (TTL lease)
//	slotd:running:{<task>}:replaced  the running record a replace last took the place of (TTL lease)
//	slotd:control:{<task>}           no key: the message published on the release channel when any of them changes
//	slotd:controls                   the epoch: INCR after each trigger and pause change (TTL PauseTTL)

var (
	//go:embed trigger.lua
	triggerLua    string
	triggerScript = redis.NewScript(triggerLua)
	//go:embed arm.lua
	armLua    string
	armScript = redis.NewScript(armLua)
	//go:embed pause.lua
	pauseLua    string
	pauseScript = redis.NewScript(pauseLua)
	//go:embed occupy.lua
	occupyLua    string
	occupyScript = redis.NewScript(occupyLua)
)

var _ lock.Controls = (*Store)(nil)

// Trigger implements Controls.
func (r *Store) Trigger(ctx context.Context, task, key string, window time.Duration) (lock.Trigger, error) {
	triggers, _, _, notice := ControlKeys(r.prefix, task)
	keys := []string{triggers}
	args := []any{window.Milliseconds(), lock.TriggerTTL.Milliseconds(), r.channel, notice}
	if key != "" {
		keys = append(keys, schema.TriggerKeys(r.prefix, task))
		args = append(args, key, lock.MaxTriggerKeys)
	}
	res, err := triggerScript.Run(ctx, r.rdb, keys, args...).Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		return lock.Trigger{}, redisErr(fmt.Errorf("lock: trigger %s (key %s): %w", task, triggers, err))
	}
	kind, _ := res[0].(string)
	sec, _ := res[1].(int64)
	if kind == "started" {
		r.bump(ctx)
	}
	out := lock.Trigger{Time: time.Unix(sec, 0).UTC()}
	switch kind {
	case "started":
		out.Result = lock.Started
	case "coalesced":
		out.Result = lock.Coalesced
	case "repeated":
		out.Result = lock.Repeated
	default:
		return lock.Trigger{}, fmt.Errorf("lock: trigger %s (key %s): unexpected reply %v", task, triggers, res)
	}
	return out, nil
}

// Triggers implements Controls.
func (r *Store) Triggers(ctx context.Context, tasks []string) ([][]time.Time, error) {
	p := r.rdb.Pipeline()
	zs := make([]*redis.StringSliceCmd, len(tasks))
	for i, task := range tasks {
		triggers, _, _, _ := ControlKeys(r.prefix, task)
		zs[i] = p.ZRange(ctx, triggers, 0, -1)
	}
	if _, err := p.Exec(ctx); err != nil {
		return nil, redisErr(fmt.Errorf("lock: triggers of %d tasks: %w", len(tasks), err))
	}
	out := make([][]time.Time, len(tasks))
	for i, z := range zs {
		triggers, _, _, _ := ControlKeys(r.prefix, tasks[i])
		ts, err := parseTriggers(tasks[i], triggers, z.Val())
		if err != nil {
			return nil, err
		}
		out[i] = ts
	}
	return out, nil
}

func parseTriggers(task, key string, members []string) ([]time.Time, error) {
	out := make([]time.Time, 0, len(members))
	for _, m := range members {
		sec, err := strconv.ParseInt(m, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("lock: triggers of %s (key %s): %w: %q", task, key, lock.ErrForeign, m)
		}
		out = append(out, time.Unix(sec, 0).UTC())
	}
	return out, nil
}

// ArmTrigger implements Controls.
func (r *Store) ArmTrigger(ctx context.Context, slot lock.Slot, doneTTL time.Duration) error {
	state, attempts := Keys(r.prefix, slot)
	if err := armScript.Run(ctx, r.rdb, []string{attempts, schema.BaseKey(state)}, lock.TriggerBase, doneTTL.Milliseconds()).Err(); err != nil {
		return redisErr(fmt.Errorf("lock: arm trigger %s (key %s): %w", slot, attempts, err))
	}
	return nil
}

// SetPaused implements Controls.
func (r *Store) SetPaused(ctx context.Context, task string, op lock.PauseOp) (bool, error) {
	arg, err := schema.PauseArg(op)
	if err != nil {
		return false, err
	}
	_, paused, _, notice := ControlKeys(r.prefix, task)
	keys := []string{paused, schema.PauseConfigKey(r.prefix, task)}
	p, changed, err := pauseReply(pauseScript.Run(ctx, r.rdb, keys, arg, lock.PauseTTL.Milliseconds(), r.channel, notice))
	if err != nil {
		return false, redisErr(fmt.Errorf("lock: %s %s (key %s): %w", arg, task, paused, err))
	}
	if changed {
		r.bump(ctx)
	}
	return p, nil
}

// Configure implements Controls: pause.lua's "config" for each task,
// queued at once so that the batcher pipelines them (a start with ten
// thousand tasks costs tens of round trips).
func (r *Store) Configure(ctx context.Context, tasks []string, paused []bool) ([]bool, error) {
	if len(paused) != len(tasks) {
		return nil, fmt.Errorf("lock: configure %d tasks with %d values", len(tasks), len(paused))
	}
	reqs := make([]scriptReq, len(tasks))
	for i, task := range tasks {
		_, key, _, notice := ControlKeys(r.prefix, task)
		reqs[i] = scriptReq{script: pauseScript, keys: []string{key, schema.PauseConfigKey(r.prefix, task)},
			args: []any{"config", lock.PauseTTL.Milliseconds(), r.channel, notice, schema.PauseValue(paused[i])}}
	}
	calls := r.batch.queue(ctx, reqs...)
	out := make([]bool, len(tasks))
	var errs []error
	bumped := false
	for i, c := range calls {
		p, changed, err := pauseReply(wait(c))
		if err != nil {
			_, key, _, _ := ControlKeys(r.prefix, tasks[i])
			errs = append(errs, redisErr(fmt.Errorf("lock: configure pause of %s (key %s): %w", tasks[i], key, err)))
			continue
		}
		out[i] = p
		if changed && !bumped {
			bumped = true
			r.bump(ctx)
		}
	}
	return out, errors.Join(errs...)
}

// pauseReply reads pause.lua's {paused, changed}.
func pauseReply(cmd *redis.Cmd) (paused, changed bool, err error) {
	res, err := cmd.Int64Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		return false, false, err
	}
	return res[0] == 1, res[1] == 1, nil
}

// bump changes the epoch after a change. The epoch's key is on a shard of
// its own, so it cannot be part of the change's script; if it fails, the
// change's notice has still gone out, and replicas read every task's
// controls at least once per ControlsSweep.
func (r *Store) bump(ctx context.Context) {
	key := EpochKey(r.prefix)
	p := r.rdb.Pipeline()
	p.Incr(ctx, key)
	p.PExpire(ctx, key, lock.PauseTTL)
	_, _ = p.Exec(ctx)
}

// Epoch implements Controls.
func (r *Store) Epoch(ctx context.Context) (int64, error) {
	key := EpochKey(r.prefix)
	p := r.rdb.Pipeline()
	g := p.Get(ctx, key)
	if _, err := p.Exec(ctx); errors.Is(err, redis.Nil) {
		return 0, nil
	} else if err != nil {
		return 0, redisErr(fmt.Errorf("lock: controls epoch (key %s): %w", key, err))
	}
	n, err := g.Int64()
	if err != nil {
		return 0, fmt.Errorf("lock: controls epoch (key %s): %w: %q", key, lock.ErrForeign, g.Val())
	}
	return n, nil
}

// Paused implements Controls: one pipelined round trip (on a Cluster, one
// per shard), a GET (and with renew a PEXPIRE) per task.
func (r *Store) Paused(ctx context.Context, tasks []string, renew bool) ([]bool, error) {
	p := r.rdb.Pipeline()
	gets := make([]*redis.StringCmd, len(tasks))
	for i, task := range tasks {
		_, key, _, _ := ControlKeys(r.prefix, task)
		gets[i] = p.Get(ctx, key)
		if renew {
			p.PExpire(ctx, key, lock.PauseTTL)
			p.PExpire(ctx, schema.PauseConfigKey(r.prefix, task), lock.PauseTTL)
		}
	}
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, redisErr(fmt.Errorf("lock: pause state of %d tasks: %w", len(tasks), err))
	}
	out := make([]bool, len(tasks))
	for i, g := range gets {
		v, err := g.Result()
		switch {
		case errors.Is(err, redis.Nil), err == nil && v == "resumed":
		case err == nil && v == "paused":
			out[i] = true
		case err == nil:
			_, key, _, _ := ControlKeys(r.prefix, tasks[i])
			return nil, fmt.Errorf("lock: pause state of %s (key %s): %w: %q", tasks[i], key, lock.ErrForeign, v)
		default:
			return nil, redisErr(fmt.Errorf("lock: pause state of %s: %w", tasks[i], err))
		}
	}
	return out, nil
}

// Occupy implements Controls.
func (r *Store) Occupy(ctx context.Context, slot lock.Slot, owner lock.Owner, lease time.Duration, replace bool) (lock.Occupancy, error) {
	_, _, running, notice := ControlKeys(r.prefix, slot.Task)
	mode := "forbid"
	if replace {
		mode = "replace"
	}
	res, err := occupyScript.Run(ctx, r.rdb, []string{running, schema.ReplacedKey(running)}, schema.Occupant(slot, owner), lease.Milliseconds(), mode, r.channel, notice).Slice()
	if err == nil && len(res) != 3 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		return lock.Occupancy{}, redisErr(fmt.Errorf("lock: occupy %s attempt %d (key %s): %w", slot, owner.Attempt, running, err))
	}
	kind, _ := res[0].(string)
	v, _ := res[1].(string)
	ms, _ := res[2].(int64)
	out := lock.Occupancy{Value: v, Other: schema.OccupantSlot(v), TTL: time.Duration(ms) * time.Millisecond}
	switch kind {
	case "taken", "replaced":
		out.Taken = true
	case "busy":
	default:
		return lock.Occupancy{}, fmt.Errorf("lock: occupy %s (key %s): unexpected reply %v", slot, running, res)
	}
	return out, nil
}

// RenewOccupancy implements Controls; it is renew.lua on the running key.
func (r *Store) RenewOccupancy(ctx context.Context, slot lock.Slot, owner lock.Owner, lease time.Duration) error {
	_, _, running, _ := ControlKeys(r.prefix, slot.Task)
	return r.compare(ctx, "renew running record of", slot, owner, renewScript, []string{running}, schema.Occupant(slot, owner), lease.Milliseconds())
}

// Vacate implements Controls; it is release.lua on the running key (whose
// message wakes nobody: the task's watchers listen for its notice).
func (r *Store) Vacate(ctx context.Context, slot lock.Slot, owner lock.Owner) error {
	_, _, running, _ := ControlKeys(r.prefix, slot.Task)
	err := r.compare(ctx, "vacate running record of", slot, owner, releaseScript, []string{running}, schema.Occupant(slot, owner), r.channel, 0)
	if errors.Is(err, lock.ErrNotHeld) {
		return nil // replaced or expired: nothing of ours to remove
	}
	return err
}

// WatchTask implements Controls: a watch on the task's notice, on the
// store's one subscription.
func (r *Store) WatchTask(task string) *lock.Watch {
	_, _, _, notice := ControlKeys(r.prefix, task)
	return r.watchKey(notice, nil)
}
