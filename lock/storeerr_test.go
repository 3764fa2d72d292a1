package lock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/lock"
)

// Classify finds the Redis error code through the lock package's wrapping
// and a Redlock's joined node errors, and tells protocol answers and
// cancellations from failures of the store.
func TestClassify(t *testing.T) {
	oom := errors.New("OOM command not allowed when used memory > 'maxmemory'. script: 0a3d, on @user_script:1.")
	for _, c := range []struct {
		name string
		err  error
		want lock.ErrorKind
	}{
		{"nil", nil, lock.KindNone},
		{"oom wrapped", fmt.Errorf("lock: claim t:1 (keys a, b): %w", oom), lock.KindOOM},
		{"noperm", errors.New("NOPERM this user has no permissions to access one of the keys used as arguments"), lock.KindNoPerm},
		{"readonly", errors.New("READONLY You can't write against a read only replica."), lock.KindReadOnly},
		{"misconf", errors.New("MISCONF Redis is configured to save RDB snapshots"), lock.KindMisconf},
		{"redlock joined", fmt.Errorf("lock: claim t:1: %w: %w", lock.ErrNoQuorum,
			errors.Join(errors.New("1 of 3"), fmt.Errorf("node 0: %w", io.EOF), fmt.Errorf("node 1: %w", oom))), lock.KindOOM},
		{"not replicated", fmt.Errorf("lock: claim t:1: %w", lock.ErrNotReplicated), lock.KindNoReplicas},
		{"not held", fmt.Errorf("lock: renew t:1 attempt 1: %w", lock.ErrNotHeld), lock.KindNone},
		{"lease lost", lock.ErrLeaseLost, lock.KindNone},
		{"canceled", fmt.Errorf("lock: claim: %w", context.Canceled), lock.KindNone},
		{"deadline", fmt.Errorf("lock: claim: %w", context.DeadlineExceeded), lock.KindTimeout},
		{"refused", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, lock.KindConn},
		{"closed", redis.ErrClosed, lock.KindConn},
		{"eof", io.EOF, lock.KindConn},
		{"other", errors.New("unexpected reply [1 2]"), lock.KindOther},
		{"noscript", errors.New("NOSCRIPT No matching script."), lock.KindNoScript},
		{"auth", errors.New("WRONGPASS invalid username-password pair"), lock.KindAuth},
		{"loading", errors.New("LOADING Redis is loading the dataset in memory"), lock.KindUnavailable},
	} {
		if got := lock.Classify(c.err); got != c.want {
			t.Errorf("%s: Classify(%v) = %q, want %q", c.name, c.err, got, c.want)
		}
	}
	for _, k := range lock.ErrorKinds {
		if k.Refusal() != (k.Fix() != "") {
			t.Errorf("%s: Refusal %v but Fix %q", k, k.Refusal(), k.Fix())
		}
	}
}
