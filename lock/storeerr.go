package lock

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
)

// ErrorKind classes a store error by what an operator must do about it.
// The Redis refusals (OOM, NOPERM, READONLY, MISCONF, NOREPLICAS) are a
// store that answers but will not take slotd's writes: every claim fails
// until the operator fixes Redis, so a replica facing one is not ready.
type ErrorKind uint8

// Error kinds, as the slotd_store_errors_total{kind} label names them.
const (
	KindNone        ErrorKind = iota // no error, or a protocol answer (ErrNotHeld, ErrForeign, ...)
	KindOOM                          // OOM: maxmemory reached under noeviction
	KindNoPerm                       // NOPERM: the ACL user lacks a command or a key of the prefix
	KindReadOnly                     // READONLY: the URL points at a read-only replica
	KindMisconf                      // MISCONF: Redis stopped writes after a failed RDB save
	KindNoReplicas                   // NOREPLICAS, or ErrNotReplicated: too few replicas acknowledged
	KindNoScript                     // NOSCRIPT: a script was not cached (go-redis reloads it)
	KindAuth                         // NOAUTH, WRONGPASS: not authenticated
	KindUnavailable                  // LOADING, BUSY, MASTERDOWN, CLUSTERDOWN, TRYAGAIN: for a while
	KindTimeout                      // no answer in time
	KindConn                         // the connection failed or closed
	KindOther                        // anything else
	numErrorKinds
)

// ErrorKinds lists every kind but KindNone, in order.
var ErrorKinds = func() []ErrorKind {
	ks := make([]ErrorKind, 0, numErrorKinds-1)
	for k := KindNone + 1; k < numErrorKinds; k++ {
		ks = append(ks, k)
	}
	return ks
}()

// NumErrorKinds is the number of kinds, KindNone included: an array
// indexed by ErrorKind has this length.
const NumErrorKinds = int(numErrorKinds)

var kindNames = [numErrorKinds]string{"", "oom", "noperm", "readonly", "misconf", "noreplicas", "noscript",
	"auth", "unavailable", "timeout", "conn", "other"}

// String is the kind's label value: "oom", "noperm", "readonly", ...; ""
// for KindNone.
func (k ErrorKind) String() string {
	if k < numErrorKinds {
		return kindNames[k]
	}
	return "other"
}

// Refusal reports whether k is a store that answers but refuses writes
// until an operator acts: oom, noperm, readonly, misconf, noreplicas.
func (k ErrorKind) Refusal() bool {
	switch k {
	case KindOOM, KindNoPerm, KindReadOnly, KindMisconf, KindNoReplicas:
		return true
	}
	return false
}

// Fix is what an operator does about a refusal, in a few words: "raise
// maxmemory or free memory", ...; "" for a kind that is not a refusal.
func (k ErrorKind) Fix() string {
	switch k {
	case KindOOM:
		return "raise maxmemory or free memory"
	case KindNoPerm:
		return "grant the Redis ACL user slotd's commands (EVALSHA, EVAL, TIME, SUBSCRIBE) on the prefix's keys (~<prefix>:*) and channels (see docs/stores.md)"
	case KindReadOnly:
		return "point slotd at the master, not a read-only replica (or use Sentinel)"
	case KindMisconf:
		return "Redis stopped writes after a failed RDB save: fix its disk or persistence settings"
	case KindNoReplicas:
		return "too few Redis replicas acknowledge writes (min-replicas-to-write, min_replicas_ack): bring them back"
	}
	return ""
}

// Code is the Redis error code of a refusal ("OOM", "NOPERM", ...), as a
// log line names it; the kind's name otherwise.
func (k ErrorKind) Code() string {
	if k.Refusal() {
		return strings.ToUpper(k.String())
	}
	return k.String()
}

// codes maps a Redis error reply's first word to its kind.
var codes = map[string]ErrorKind{
	"OOM": KindOOM, "NOPERM": KindNoPerm, "READONLY": KindReadOnly, "MISCONF": KindMisconf,
	"NOREPLICAS": KindNoReplicas, "NOSCRIPT": KindNoScript, "NOAUTH": KindAuth, "WRONGPASS": KindAuth,
	"LOADING": KindUnavailable, "BUSY": KindUnavailable, "MASTERDOWN": KindUnavailable,
	"CLUSTERDOWN": KindUnavailable, "TRYAGAIN": KindUnavailable,
}

// Classify says what kind of store error err is. It finds a Redis error
// reply anywhere in err's chain (the lock package wraps them with the slot
// and the keys; a Redlock joins one per node) by its code, the reply's
// first word. KindNone: err is nil, or an answer of the protocol rather
// than a failure of the store (ErrNotHeld, ErrForeign, ErrLeaseLost), or
// a cancellation by the caller. ErrNotReplicated is KindNoReplicas.
func Classify(err error) ErrorKind {
	if err == nil {
		return KindNone
	}
	if k := redisCode(err); k != KindNone {
		return k
	}
	var nerr net.Error
	switch {
	case errors.Is(err, ErrNotReplicated):
		// A claim that the replicas did not acknowledge fails closed, as
		// every claim will until they come back.
		return KindNoReplicas
	case errors.Is(err, ErrNotHeld), errors.Is(err, ErrForeign), errors.Is(err, ErrLeaseLost),
		errors.Is(err, context.Canceled):
		return KindNone
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &nerr) && nerr.Timeout(),
		strings.Contains(err.Error(), "pool timeout"):
		return KindTimeout
	case errors.As(err, new(*net.OpError)), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, errClosed),
		strings.Contains(err.Error(), "client is closed"):
		return KindConn
	}
	return KindOther
}

// redisCode walks err's chain for an error whose message starts with a
// known Redis error code.
func redisCode(err error) ErrorKind {
	for err != nil {
		code, _, _ := strings.Cut(err.Error(), " ")
		if k, ok := codes[code]; ok {
			return k
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if k := redisCode(e); k != KindNone {
					return k
				}
			}
			return KindNone
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		default:
			return KindNone
		}
	}
	return KindNone
}
