// Package lock is slotd's slot protocol: who may run one slot of one task,
// how many times, and how the others learn that they may try again.
//
// A slot is a task name plus a scheduled time. Replicas race to Claim it; the
// winner holds it under a short lease that a Lease watchdog renews, and then
// either Completes it (a long-lived done marker: nobody runs the slot again) or
// Releases it (peers watching the slot are woken to retry). A per-slot counter
// caps the attempts and yields the fencing token.
//
// Guarantees, for every Store implementation (each store's package runs
// the conformance suite, package locktest):
//   - at most one holder per slot while its lease is valid;
//   - renew, complete and release change nothing unless the caller is the
//     current holder (each is one atomic compare-then-write);
//   - attempts never exceed Policy.MaxAttempts;
//   - every key written has a TTL;
//   - a claim before the slot time by the store's clock (minus
//     Policy.Tolerance) or at or after the deadline is refused.
//
// The stores are packages of their own, as database/sql's drivers are:
// redislock (one Redis server, Sentinel, Cluster, or a Redlock quorum of
// independent servers), etcdlock, zklock and memlock (this process's
// memory). Each keeps its own layout of keys; they share the state value
// (Value), and each classes its own failures as a StoreError. Package
// mutex offers the same machinery for locking any resource of one's own.
package lock

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// Errors returned by Store methods and carried as context causes.
var (
	// ErrNotHeld: the caller is not the slot's current holder (its lease ran
	// out, or another attempt holds it). Nothing was changed.
	ErrNotHeld = errors.New("lock: not held")
	// ErrLeaseLost is the cause of a Lease's context when the lease could not
	// be renewed in time. The task must stop; the slot is not completed.
	ErrLeaseLost = errors.New("lock: lease lost")
	// ErrForeign: a slot key holds a value slotd did not write. slotd leaves
	// it alone and does not run the slot.
	ErrForeign = errors.New("lock: foreign value in slot key")
)

// Slot names one scheduled run of one task.
type Slot struct {
	Task     string    // task name
	ID       string    // slot id, e.g. "2024011514"
	Time     time.Time // scheduled time; no claim succeeds before it
	Deadline time.Time // end of the slot window; no claim succeeds at or after it
}

// String is "<task>:<slot id>", as errors and logs name a slot.
func (s Slot) String() string { return s.Task + ":" + s.ID }

// Policy is what a claim needs to know about the task.
type Policy struct {
	Lease       time.Duration // how long a claim holds without renewal
	DoneTTL     time.Duration // how long the done marker and the counter live
	MaxAttempts int           // cap on claims won per slot
	Tolerance   time.Duration // how early, by the store's clock, a claim may start
}

// Result is the outcome of a claim.
type Result int

// Claim results.
const (
	Won       Result = iota + 1 // the caller holds the slot
	Held                        // another attempt holds it; Claim.Wait is its remaining lease
	Done                        // the slot succeeded
	Exhausted                   // MaxAttempts attempts were made, none succeeded
	Early                       // the slot time, or a retry backoff's end (Claim.Backoff), has not come; Claim.Wait says how long until it does
	Late                        // the slot window has closed, or a retry backoff ends at or after it (Claim.Backoff)
)

var resultNames = [...]string{"", "won", "held", "done", "exhausted", "early", "late"}

// String is the result's lower-case name: "won", "held", and so on.
func (r Result) String() string {
	if r > 0 && int(r) < len(resultNames) {
		return resultNames[r]
	}
	return "Result(" + strconv.Itoa(int(r)) + ")"
}

// Claim is the answer to Store.Claim.
type Claim struct {
	Result   Result
	Attempt  int           // Won: the caller's attempt; Held, Done: the holder's; Exhausted: attempts made
	Base     int           // Won, Exhausted: attempts made before the slot's last rerun; the cap counts from here
	Holder   string        // Held, Done: the holder's replica id (without its instance nonce)
	Instance string        // Held, Done: the holder's instance nonce
	Wait     time.Duration // Held: the holder's remaining lease; Early: time until the slot time or the backoff's end
	// Backoff, on Early or Late, says why: a failed attempt released the
	// slot with a retry backoff (Store.ReleaseAfter) that has not
	// ended (Early), or that ends at or after the slot's deadline (Late).
	Backoff bool
	Now     time.Time // the store's clock when it decided
	Sent    time.Time // local time (with its monotonic reading) when the claim was sent
	// Revision, on Won, is the store's revision of the claim where the
	// store orders every write (etcd's revision, ZooKeeper's zxid), for
	// sinks that want one store-wide order beside the fencing token; 0 on
	// Redis, which has none.
	Revision int64
}

// Owner identifies one attempt: the process that claimed it and its
// attempt number.
//
// ID is the owner id the claim was made with — not the replica id: slotd's
// scheduler makes it unique per process, "<replica id>#<instance nonce>"
// (OwnerID), so that two processes started with one replica id never
// renew, complete or release each other's claims. The stores treat it as
// opaque; State and Claim split it again (Holder, Instance).
type Owner struct {
	ID      string
	Attempt int
}

// OwnerID is the owner id of process instance of replica:
// "<replica>#<instance>".
func OwnerID(replica, instance string) string { return replica + "#" + instance }

// Token is the fencing token of an attempt: slot_unix_seconds*1000 + attempt.
// Slot times of one task are at least a second apart and attempts are capped
// below 1000, so the token of every attempt is greater than that of every
// earlier attempt of the same task, in this slot or an earlier one. A
// downstream store that keeps the highest token it has accepted per task can
// reject a stale writer whose lease ran out while it was paused.
func Token(slot time.Time, attempt int) int64 {
	return slot.Unix()*1000 + int64(attempt)
}

// Attempt numbers, and how a state value that holds the next attempt back
// begins.
const (
	// BackoffPrefix starts a backoff state value (Store.ReleaseAfter),
	// which the store's not-before time in unix milliseconds follows.
	BackoffPrefix = "backoff:"
	// MaxAttempts is the largest attempt cap Token can encode.
	MaxAttempts = 999
	// TriggerBase is the attempt count a triggered slot starts from: its
	// first attempt is TriggerBase+1. A scheduled slot of the same second
	// counts from 0, so the trigger's tokens are greater unless that slot
	// had more than TriggerBase attempts (reruns included).
	TriggerBase = 500
)

// State is a read of one slot's keys, for status pages and tests.
type State struct {
	Status   string    // "free", "running", "done", "backoff" or "foreign"
	Holder   string    // running/done: replica id
	Instance string    // running/done: the holder's instance nonce ("" if the value has none)
	Attempt  int       // running/done: that attempt's number
	Attempts int       // attempts counted so far
	Finished time.Time // done: when, by the store's clock
	// NotBefore, in status "backoff": a failed attempt's retry backoff
	// holds the slot until then, by the store's clock.
	NotBefore time.Time
	TTL       time.Duration // running: lease left; done: marker left
	Value     string        // the raw state value
}

// ReadState reads one slot's keys from s (see Store.States).
func ReadState(ctx context.Context, s Store, slot Slot) (State, error) {
	sts, err := s.States(ctx, []Slot{slot})
	if len(sts) == 0 {
		return State{}, err
	}
	return sts[0], err
}

// Store is the slot protocol. Every store package implements it.
type Store interface {
	// Claim tries to take slot for the owner id owner (see Owner.ID). A
	// result other than Won is not an error. An error means the outcome is unknown: the caller must not run
	// the task (the lease, if any, simply expires).
	Claim(ctx context.Context, slot Slot, owner string, p Policy) (Claim, error)
	// Renew extends owner's lease. ErrNotHeld if owner does not hold slot.
	Renew(ctx context.Context, slot Slot, owner Owner, lease time.Duration) error
	// Complete marks slot done by owner for doneTTL. It succeeds again if
	// owner already completed it. ErrNotHeld if owner does not hold slot.
	Complete(ctx context.Context, slot Slot, owner Owner, doneTTL time.Duration) error
	// Release frees slot and wakes its watchers. ErrNotHeld if owner does
	// not hold it.
	Release(ctx context.Context, slot Slot, owner Owner) error
	// ReleaseAfter is Release with a retry backoff, kept fleet-wide: until
	// delay after the release by the store's clock, the slot's claims by
	// any replica (a process started after this one was killed included)
	// answer Early, with Claim.Backoff set and Claim.Wait the time left —
	// or Late, if the delay ends at or after the slot's deadline (no
	// attempt can start in time). A delay ≤ 0 is Release. An operator's
	// rerun clears the backoff with the rest of the state.
	ReleaseAfter(ctx context.Context, slot Slot, owner Owner, delay time.Duration) error
	// Watch reports releases of slot until stopped.
	Watch(slot Slot) *Watch
	// States reads the keys of many slots at once (one round trip on
	// Redis). If the store cannot answer it returns nil and the error. A
	// slot holding a foreign value reads as Status "foreign" and adds an
	// ErrForeign to the joined error; the others still read.
	States(ctx context.Context, slots []Slot) ([]State, error)
	// Time is the store's clock, against which slot times are checked.
	Time(ctx context.Context) (time.Time, error)
	// Rerun is an operator's reset of a settled or failing slot so that it
	// may run again within its window: it clears the state and restarts the
	// attempt cap, but never the attempt numbers (so fencing tokens keep
	// growing), and wakes the slot's watchers. A running or foreign state is
	// refused unless force.
	Rerun(ctx context.Context, slot Slot, force bool) (Rerun, error)
}

// Rerun is the answer to Store.Rerun.
type Rerun struct {
	Cleared  bool          // the slot was reset
	Refused  string        // "running" or "foreign" when not cleared
	Previous string        // the state value before ("" if none)
	Attempts int           // attempts made so far (the new base)
	TTL      time.Duration // refused: the state's remaining TTL
	Woken    int64         // cleared: subscribers notified (Redis) or watchers woken (Memory)
}
