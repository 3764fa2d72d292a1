package lock

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Value is a slot's state value, as every store writes it:
// "run:<owner>:<attempt>" while Owner's attempt runs,
// "done:<owner>:<attempt>:<unix ms>" once it succeeded, and
// "backoff:<unix ms>" after a failed attempt released it with a retry
// backoff (Store.ReleaseAfter): no claim before then. The owner id may contain
// colons, so the numbers are read from the right.
type Value struct {
	Owner    Owner
	Done     bool
	Finished time.Time // Done: when, by the store's clock (to the millisecond)
	// NotBefore, when set, makes the value a backoff: the slot is free,
	// but no claim wins before this time by the store's clock (to the
	// millisecond). Owner and Done are then unset.
	NotBefore time.Time

	raw     string // the text it was parsed from
	foreign bool   // raw is not a value slotd writes
}

// String is the value as a store writes it.
func (v Value) String() string {
	if v.foreign {
		return v.raw
	}
	if !v.NotBefore.IsZero() {
		return BackoffPrefix + strconv.FormatInt(v.NotBefore.UnixMilli(), 10)
	}
	run := v.Owner.ID + ":" + strconv.Itoa(v.Owner.Attempt)
	if !v.Done {
		return "run:" + run
	}
	return "done:" + run + ":" + strconv.FormatInt(v.Finished.UnixMilli(), 10)
}

// ParseValue reads a state value. A value slotd did not write is an error
// wrapping ErrForeign, and its Value reads as State "foreign".
func ParseValue(s string) (Value, error) {
	foreign := func() (Value, error) { return Value{raw: s, foreign: true}, fmt.Errorf("%w: %q", ErrForeign, s) }
	kind, rest, _ := strings.Cut(s, ":")
	v := Value{raw: s}
	switch kind {
	case "backoff":
		ms, err := strconv.ParseInt(rest, 10, 64)
		if err != nil || ms <= 0 {
			return foreign()
		}
		v.NotBefore = time.UnixMilli(ms).UTC()
		return v, nil
	case "run":
	case "done":
		v.Done = true
		i := strings.LastIndexByte(rest, ':')
		if i < 0 {
			return foreign()
		}
		ms, err := strconv.ParseInt(rest[i+1:], 10, 64)
		if err != nil {
			return foreign()
		}
		v.Finished = time.UnixMilli(ms).UTC()
		rest = rest[:i]
	default:
		return foreign()
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return foreign()
	}
	n, err := strconv.Atoi(rest[i+1:])
	if err != nil || n < 1 {
		return foreign()
	}
	v.Owner = Owner{ID: rest[:i], Attempt: n}
	return v, nil
}

// State is the value as States reports it, without the TTL and the
// attempts counted, which live beside it.
func (v Value) State() State {
	if v.foreign {
		return State{Status: "foreign", Value: v.raw}
	}
	if !v.NotBefore.IsZero() {
		return State{Status: "backoff", NotBefore: v.NotBefore, Value: v.String()}
	}
	st := State{Status: "running", Attempt: v.Owner.Attempt, Value: v.raw}
	if st.Value == "" {
		st.Value = v.String()
	}
	if v.Done {
		st.Status, st.Finished = "done", v.Finished
	}
	st.Holder, st.Instance = splitOwner(v.Owner.ID)
	return st
}

// splitOwner undoes OwnerID; an owner id without '#' (written before
// instance nonces) is all replica. Replica ids may contain '#': the nonce
// is what follows the last one.
func splitOwner(id string) (replica, instance string) {
	if i := strings.LastIndexByte(id, '#'); i >= 0 {
		return id[:i], id[i+1:]
	}
	return id, ""
}
