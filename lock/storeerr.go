package lock

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
)

// ErrorKind classes a store error by what an operator must do about it.
// The refusals (oom, noperm, readonly, misconf, noreplicas, auth) are a store
// that answers but will not take slotd's writes: every claim fails until
// the operator fixes the store, so a replica facing one is not ready.
type ErrorKind uint8

// Error kinds, as the slotd_store_errors_total{kind} label names them.
// NumErrorKinds is the number of kinds, KindNone included: an array
// indexed by ErrorKind has this length.
const (
	KindNone        ErrorKind = iota // no error, or a protocol answer (ErrNotHeld, ErrForeign, ...)
	KindOOM                          // the store is out of memory or space (Redis OOM)
	KindNoPerm                       // the store's user lacks a permission (Redis NOPERM)
	KindReadOnly                     // the store takes no writes here (Redis READONLY: a replica)
	KindMisconf                      // the store stopped writes after a failure of its own (Redis MISCONF)
	KindNoReplicas                   // too few replicas acknowledged a write (Redis NOREPLICAS, WAIT)
	KindNoScript                     // a script was not cached (Redis NOSCRIPT; go-redis reloads it)
	KindAuth                         // not authenticated (Redis NOAUTH, WRONGPASS)
	KindUnavailable                  // unavailable for a while (Redis LOADING, BUSY, CLUSTERDOWN, ...)
	KindTimeout                      // no answer in time
	KindConn                         // the connection failed or closed
	KindOther                        // anything else
	NumErrorKinds
)

var kindNames = [NumErrorKinds]string{"", "oom", "noperm", "readonly", "misconf", "noreplicas", "noscript",
	"auth", "unavailable", "timeout", "conn", "other"}

// String is the kind's label value: "oom", "noperm", "readonly", ...; ""
// for KindNone.
func (k ErrorKind) String() string {
	if k < NumErrorKinds {
		return kindNames[k]
	}
	return "other"
}

// Refusal reports whether k is a store that answers but refuses writes
// until an operator acts: oom, noperm, readonly, misconf, noreplicas,
// auth.
func (k ErrorKind) Refusal() bool {
	switch k {
	case KindOOM, KindNoPerm, KindReadOnly, KindMisconf, KindNoReplicas, KindAuth:
		return true
	}
	return false
}

// StoreError is a failure a store recognised and named at its boundary:
// each store wraps the errors of its client that it can class (a Redis
// error reply's code, an etcd or ZooKeeper error) in one, with the fix an
// operator applies, so that readiness, logs and metrics need not know any
// store's vocabulary. Error and Unwrap are Err's.
type StoreError struct {
	Kind  ErrorKind
	Store string // the store that answered: "redis", "etcd", ...
	Code  string // the store's own name for it: "OOM", "NOPERM", ...
	Fix   string // a refusal: what an operator does about it, in a few words
	// Applied: the write took effect all the same (a Redis complete done
	// on the master but not acknowledged by enough replicas): the caller
	// must not retry it.
	Applied bool
	Err     error
}

func (e *StoreError) Error() string { return e.Err.Error() }
func (e *StoreError) Unwrap() error { return e.Err }

// Classify says what kind of store error err is: the Kind of the first
// StoreError in err's chain (a Redlock joins one per node), else a
// generic class. KindNone: err is nil, or an answer of the protocol rather
// than a failure of the store (ErrNotHeld, ErrForeign, ErrLeaseLost), or
// a cancellation by the caller.
func Classify(err error) ErrorKind {
	if err == nil {
		return KindNone
	}
	if se := (*StoreError)(nil); errors.As(err, &se) {
		return se.Kind
	}
	var nerr net.Error
	switch {
	case errors.Is(err, ErrNotHeld), errors.Is(err, ErrForeign), errors.Is(err, ErrLeaseLost),
		errors.Is(err, context.Canceled):
		return KindNone
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &nerr) && nerr.Timeout():
		return KindTimeout
	case errors.As(err, new(*net.OpError)), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return KindConn
	}
	return KindOther
}

// applied reports whether err is a StoreError whose write took effect.
func applied(err error) bool {
	se := (*StoreError)(nil)
	return errors.As(err, &se) && se.Applied
}
