package lock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

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

var _ Controls = (*Redis)(nil)

// Trigger implements Controls.
func (r *Redis) Trigger(ctx context.Context, task, key string, window time.Duration) (Trigger, error) {
	triggers, _, _, notice := ControlKeys(r.prefix, task)
	keys := []string{triggers}
	args := []any{window.Milliseconds(), TriggerTTL.Milliseconds(), r.channel, notice}
	if key != "" {
		keys = append(keys, triggerKeys(r.prefix, task))
		args = append(args, key, MaxTriggerKeys)
	}
	res, err := triggerScript.Run(ctx, r.rdb, keys, args...).Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		return Trigger{}, fmt.Errorf("lock: trigger %s (key %s): %w", task, triggers, err)
	}
	kind, _ := res[0].(string)
	sec, _ := res[1].(int64)
	if kind == "started" {
		r.bump(ctx)
	}
	out := Trigger{Time: time.Unix(sec, 0).UTC()}
	switch kind {
	case "started":
		out.Result = Started
	case "coalesced":
		out.Result = Coalesced
	case "repeated":
		out.Result = Repeated
	default:
		return Trigger{}, fmt.Errorf("lock: trigger %s (key %s): unexpected reply %v", task, triggers, res)
	}
	return out, nil
}

// Triggers implements Controls.
func (r *Redis) Triggers(ctx context.Context, tasks []string) ([][]time.Time, error) {
	p := r.rdb.Pipeline()
	zs := make([]*redis.StringSliceCmd, len(tasks))
	for i, task := range tasks {
		triggers, _, _, _ := ControlKeys(r.prefix, task)
		zs[i] = p.ZRange(ctx, triggers, 0, -1)
	}
	if _, err := p.Exec(ctx); err != nil {
		return nil, fmt.Errorf("lock: triggers of %d tasks: %w", len(tasks), err)
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
			return nil, fmt.Errorf("lock: triggers of %s (key %s): %w: %q", task, key, ErrForeign, m)
		}
		out = append(out, time.Unix(sec, 0).UTC())
	}
	return out, nil
}

// ArmTrigger implements Controls.
func (r *Redis) ArmTrigger(ctx context.Context, slot Slot, doneTTL time.Duration) error {
	state, attempts := Keys(r.prefix, slot)
	if err := armScript.Run(ctx, r.rdb, []string{attempts, baseKey(state)}, TriggerBase, doneTTL.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("lock: arm trigger %s (key %s): %w", slot, attempts, err)
	}
	return nil
}

// SetPaused implements Controls.
func (r *Redis) SetPaused(ctx context.Context, task string, op PauseOp) (bool, error) {
	arg, err := pauseArg(op)
	if err != nil {
		return false, err
	}
	_, paused, _, notice := ControlKeys(r.prefix, task)
	keys := []string{paused, PauseConfigKey(r.prefix, task)}
	p, changed, err := pauseReply(pauseScript.Run(ctx, r.rdb, keys, arg, PauseTTL.Milliseconds(), r.channel, notice))
	if err != nil {
		return false, fmt.Errorf("lock: %s %s (key %s): %w", arg, task, paused, err)
	}
	if changed {
		r.bump(ctx)
	}
	return p, nil
}

// Configure implements Controls: pause.lua's "config" for each task,
// queued at once so that the batcher pipelines them (a start with ten
// thousand tasks costs tens of round trips).
func (r *Redis) Configure(ctx context.Context, tasks []string, paused []bool) ([]bool, error) {
	if len(paused) != len(tasks) {
		return nil, fmt.Errorf("lock: configure %d tasks with %d values", len(tasks), len(paused))
	}
	reqs := make([]scriptReq, len(tasks))
	for i, task := range tasks {
		_, key, _, notice := ControlKeys(r.prefix, task)
		reqs[i] = scriptReq{script: pauseScript, keys: []string{key, PauseConfigKey(r.prefix, task)},
			args: []any{"config", PauseTTL.Milliseconds(), r.channel, notice, pauseValue(paused[i])}}
	}
	calls := r.batch.queue(ctx, reqs...)
	out := make([]bool, len(tasks))
	var errs []error
	bumped := false
	for i, c := range calls {
		p, changed, err := pauseReply(wait(c))
		if err != nil {
			_, key, _, _ := ControlKeys(r.prefix, tasks[i])
			errs = append(errs, fmt.Errorf("lock: configure pause of %s (key %s): %w", tasks[i], key, err))
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
func (r *Redis) bump(ctx context.Context) {
	key := EpochKey(r.prefix)
	p := r.rdb.Pipeline()
	p.Incr(ctx, key)
	p.PExpire(ctx, key, PauseTTL)
	_, _ = p.Exec(ctx)
}

// Epoch implements Controls.
func (r *Redis) Epoch(ctx context.Context) (int64, error) {
	key := EpochKey(r.prefix)
	p := r.rdb.Pipeline()
	g := p.Get(ctx, key)
	if _, err := p.Exec(ctx); errors.Is(err, redis.Nil) {
		return 0, nil
	} else if err != nil {
		return 0, fmt.Errorf("lock: controls epoch (key %s): %w", key, err)
	}
	n, err := g.Int64()
	if err != nil {
		return 0, fmt.Errorf("lock: controls epoch (key %s): %w: %q", key, ErrForeign, g.Val())
	}
	return n, nil
}

// Paused implements Controls: one pipelined round trip (on a Cluster, one
// per shard), a GET (and with renew a PEXPIRE) per task.
func (r *Redis) Paused(ctx context.Context, tasks []string, renew bool) ([]bool, error) {
	p := r.rdb.Pipeline()
	gets := make([]*redis.StringCmd, len(tasks))
	for i, task := range tasks {
		_, key, _, _ := ControlKeys(r.prefix, task)
		gets[i] = p.Get(ctx, key)
		if renew {
			p.PExpire(ctx, key, PauseTTL)
			p.PExpire(ctx, PauseConfigKey(r.prefix, task), PauseTTL)
		}
	}
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("lock: pause state of %d tasks: %w", len(tasks), err)
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
			return nil, fmt.Errorf("lock: pause state of %s (key %s): %w: %q", tasks[i], key, ErrForeign, v)
		default:
			return nil, fmt.Errorf("lock: pause state of %s: %w", tasks[i], err)
		}
	}
	return out, nil
}

// Occupy implements Controls.
func (r *Redis) Occupy(ctx context.Context, slot Slot, owner Owner, lease time.Duration, replace bool) (Occupancy, error) {
	_, _, running, notice := ControlKeys(r.prefix, slot.Task)
	mode := "forbid"
	if replace {
		mode = "replace"
	}
	res, err := occupyScript.Run(ctx, r.rdb, []string{running}, occupant(slot, owner), lease.Milliseconds(), mode, r.channel, notice).Slice()
	if err == nil && len(res) != 3 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		return Occupancy{}, fmt.Errorf("lock: occupy %s attempt %d (key %s): %w", slot, owner.Attempt, running, err)
	}
	kind, _ := res[0].(string)
	v, _ := res[1].(string)
	ms, _ := res[2].(int64)
	out := Occupancy{Value: v, Other: occupantSlot(v), TTL: time.Duration(ms) * time.Millisecond}
	switch kind {
	case "taken", "replaced":
		out.Taken = true
	case "busy":
	default:
		return Occupancy{}, fmt.Errorf("lock: occupy %s (key %s): unexpected reply %v", slot, running, res)
	}
	return out, nil
}

// RenewOccupancy implements Controls; it is renew.lua on the running key.
func (r *Redis) RenewOccupancy(ctx context.Context, slot Slot, owner Owner, lease time.Duration) error {
	_, _, running, _ := ControlKeys(r.prefix, slot.Task)
	return r.compare(ctx, "renew running record of", slot, owner, renewScript, []string{running}, occupant(slot, owner), lease.Milliseconds())
}

// Vacate implements Controls; it is release.lua on the running key (whose
// message wakes nobody: the task's watchers listen for its notice).
func (r *Redis) Vacate(ctx context.Context, slot Slot, owner Owner) error {
	_, _, running, _ := ControlKeys(r.prefix, slot.Task)
	err := r.compare(ctx, "vacate running record of", slot, owner, releaseScript, []string{running}, occupant(slot, owner), r.channel)
	if errors.Is(err, ErrNotHeld) {
		return nil // replaced or expired: nothing of ours to remove
	}
	return err
}

// WatchTask implements Controls: a watch on the task's notice, on the
// store's one subscription.
func (r *Redis) WatchTask(task string) *Watch {
	_, _, _, notice := ControlKeys(r.prefix, task)
	return r.watchKey(notice, nil)
}
