package lock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/slotd/slotd/lock"
)

// Classify finds a store's StoreError through wrapping and joined errors
// (a Redlock's nodes), and tells protocol answers and cancellations from
// failures of the store by their generic classes.
func TestClassify(t *testing.T) {
	oom := &lock.StoreError{Kind: lock.KindOOM, Store: "redis", Code: "OOM", Fix: "raise maxmemory or free memory",
		Err: errors.New("OOM command not allowed when used memory > 'maxmemory'.")}
	for _, c := range []struct {
		name string
		err  error
		want lock.ErrorKind
	}{
		{"nil", nil, lock.KindNone},
		{"store error wrapped", fmt.Errorf("lock: claim t:1 (keys a, b): %w", oom), lock.KindOOM},
		{"joined", fmt.Errorf("lock: claim t:1: no quorum: %w",
			errors.Join(errors.New("1 of 3"), fmt.Errorf("node 0: %w", io.EOF), fmt.Errorf("node 1: %w", oom))), lock.KindOOM},
		{"not held", fmt.Errorf("lock: renew t:1 attempt 1: %w", lock.ErrNotHeld), lock.KindNone},
		{"lease lost", lock.ErrLeaseLost, lock.KindNone},
		{"foreign", fmt.Errorf("lock: claim t:1: %w", lock.ErrForeign), lock.KindNone},
		{"canceled", fmt.Errorf("lock: claim: %w", context.Canceled), lock.KindNone},
		{"deadline", fmt.Errorf("lock: claim: %w", context.DeadlineExceeded), lock.KindTimeout},
		{"refused", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, lock.KindConn},
		{"eof", io.EOF, lock.KindConn},
		{"other", errors.New("unexpected reply [1 2]"), lock.KindOther},
		// The store's vocabulary is the store's: a bare Redis reply that no
		// store wrapped is no refusal.
		{"unwrapped code", errors.New("OOM command not allowed"), lock.KindOther},
	} {
		if got := lock.Classify(c.err); got != c.want {
			t.Errorf("%s: Classify(%v) = %q, want %q", c.name, c.err, got, c.want)
		}
	}
	if got, want := fmt.Errorf("x: %w", oom).Error(), "x: "+oom.Err.Error(); got != want {
		t.Errorf("a StoreError reads as its Err: %q, want %q", got, want)
	}
	if !errors.Is(fmt.Errorf("x: %w", &lock.StoreError{Kind: lock.KindConn, Err: io.EOF}), io.EOF) {
		t.Error("a StoreError does not unwrap to its Err")
	}
}
