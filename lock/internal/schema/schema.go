// Package schema is the layout of slotd's keys on Redis, and their values:
// the one description that the Redis store (package redislock, which
// exports it) and its in-memory mirror (package memlock, whose keys are
// the same, so that its tests plant values as on Redis) both follow.
package schema

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/slotd/slotd/lock"
)

// Keys returns the state and attempts keys of slot under prefix. The
// braces are a Redis Cluster hash tag, so that one slot's keys share a
// shard.
func Keys(prefix string, slot lock.Slot) (state, attempts string) {
	state = prefix + ":{" + slot.Task + ":" + slot.ID + "}"
	return state, state + ":attempts"
}

// SlotOf is the task and slot id of state key under prefix (see Keys);
// false for any other key (its attempts or base, a control's, the fleet's).
// Task names hold no colon, so the first one inside the braces ends it.
func SlotOf(prefix, key string) (task, id string, ok bool) {
	if len(key) < len(prefix)+3 || key[:len(prefix)] != prefix || key[len(prefix):len(prefix)+2] != ":{" || key[len(key)-1] != '}' {
		return "", "", false
	}
	task, id, ok = strings.Cut(key[len(prefix)+2:len(key)-1], ":")
	if !ok || task == "" || id == "" || strings.ContainsAny(id, "{}") {
		return "", "", false
	}
	return task, id, true
}

// BaseKey holds the attempts counted before the slot's last rerun.
func BaseKey(state string) string { return state + ":base" }

// OnceKey is the key of slot's marker for event under prefix.
func OnceKey(prefix string, slot lock.Slot, event string) string {
	state, _ := Keys(prefix, slot)
	return state + ":once:" + event
}

// Run is the state value of owner's running attempt.
func Run(owner lock.Owner) string { return lock.Value{Owner: owner}.String() }

// DonePrefix is owner's done value without its time, to which a completion
// appends the store's clock (complete.lua makes it from the owner value).
func DonePrefix(owner lock.Owner) string {
	return strings.TrimSuffix(lock.Value{Owner: owner, Done: true, Finished: time.UnixMilli(0)}.String(), "0")
}

// DecodeState builds a State from a slot's raw keys: the state value (if
// present), the attempts counter (if present) and the state's TTL.
func DecodeState(value string, hasValue bool, attempts string, hasAttempts bool, ttl time.Duration) (lock.State, error) {
	st := lock.State{Status: "free"}
	var err error
	if hasValue {
		var v lock.Value
		v, err = lock.ParseValue(value)
		st = v.State()
		if err == nil {
			st.TTL = ttl
		}
	}
	if hasAttempts {
		n, aerr := strconv.Atoi(attempts)
		if aerr != nil {
			return st, errors.Join(err, fmt.Errorf("attempts %w: %q", lock.ErrForeign, attempts))
		}
		st.Attempts = n
	}
	return st, err
}

// ControlKeys returns task's control keys under prefix.
func ControlKeys(prefix, task string) (triggers, paused, running, notice string) {
	tag := "{" + task + "}"
	return prefix + ":triggers:" + tag, prefix + ":paused:" + tag, prefix + ":running:" + tag, prefix + ":control:" + tag
}

// ReplacedKey is the key, beside a task's running key, of the running
// record a replace last took the place of (occupy.lua): a later Occupy of
// the replacing slot answers it, so that the slot's retry also awaits the
// replaced attempt's stop.
func ReplacedKey(running string) string { return running + ":replaced" }

// TallyKey is the key of replica's tally of its slots due at at (see
// lock.Peeker). The hash tag is the fire time's, so that the tallies a
// deferring replica reads for one fire time share a Cluster shard.
func TallyKey(prefix string, at time.Time, replica string) string {
	return prefix + ":tally:{" + strconv.FormatInt(at.UnixMilli(), 10) + "}:" + replica
}

// ParseTally is a tally's value: a sum no longer than a uint64's digits.
func ParseTally(key, v string) (uint64, error) {
	sum, err := strconv.ParseUint(v, 10, 64)
	if err != nil || len(v) > 20 {
		return 0, fmt.Errorf("lock: tally %s holds %.40q, not a sum", key, v)
	}
	return sum, nil
}

// EpochKey is the key of the controls' epoch under prefix.
func EpochKey(prefix string) string { return prefix + ":controls" }

// TriggerKeys is the key of task's idempotency keys: a sorted set of the
// latest lock.MaxTriggerKeys, each scored by the unix second of the
// trigger it started.
func TriggerKeys(prefix, task string) string { return prefix + ":trigger-keys:{" + task + "}" }

// PauseConfigKey is the key of the config's paused value last applied to
// task (lock.Controls.Configure), beside its pause state.
func PauseConfigKey(prefix, task string) string { return prefix + ":paused:{" + task + "}:config" }

// PauseValue is a pause state as the store spells it.
func PauseValue(paused bool) string {
	if paused {
		return "paused"
	}
	return "resumed"
}

// Occupant is the running record of owner's attempt of slot.
func Occupant(slot lock.Slot, owner lock.Owner) string { return slot.ID + " " + Run(owner) }

// OccupantSlot is the slot id in a running record.
func OccupantSlot(v string) string {
	id, _, _ := strings.Cut(v, " ")
	return id
}

// PauseArg is op as the scripts spell it.
func PauseArg(op lock.PauseOp) (string, error) {
	switch op {
	case lock.Pause:
		return "pause", nil
	case lock.Resume:
		return "resume", nil
	case lock.Seed:
		return "seed", nil
	}
	return "", fmt.Errorf("lock: unknown pause operation %d", op)
}

// ParseState reads a state value as States reports it (see lock.Value).
func ParseState(value string) (lock.State, error) {
	v, err := lock.ParseValue(value)
	return v.State(), err
}

// SplitOwner splits an owner id into the replica id and the instance
// nonce, as State does (see lock.OwnerID).
func SplitOwner(id string) (replica, instance string) {
	st := lock.Value{Owner: lock.Owner{ID: id, Attempt: 1}}.State()
	return st.Holder, st.Instance
}
