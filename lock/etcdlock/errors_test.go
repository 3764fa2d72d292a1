package etcdlock

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/slotd/slotd/lock"
)

// The store classes etcd's refusals, as the client returns them (its
// EtcdError) or as a gRPC status, through its own wrapping and joined
// errors, with the fix to name; an error it cannot class passes unchanged.
func TestEtcdErr(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want lock.ErrorKind
		code string
	}{
		{"nospace", fmt.Errorf("etcdlock: claim t:1 (keys a, b): %w", rpctypes.ErrNoSpace), lock.KindOOM, "NOSPACE"},
		{"nospace status", fmt.Errorf("etcdlock: probe k: %w", rpctypes.ErrGRPCNoSpace), lock.KindOOM, "NOSPACE"},
		{"permission", fmt.Errorf("etcdlock: renew t:1 attempt 1: %w", rpctypes.ErrPermissionDenied), lock.KindNoPerm, "PERMISSION_DENIED"},
		{"token", rpctypes.ErrInvalidAuthToken, lock.KindAuth, "INVALID_AUTH_TOKEN"},
		{"user", fmt.Errorf("x: %w", errors.Join(io.EOF, rpctypes.ErrUserNotFound)), lock.KindAuth, "USER_NOT_FOUND"},
		{"auth failed", rpctypes.ErrAuthFailed, lock.KindAuth, "AUTH_FAILED"},
		{"lease not found", rpctypes.ErrLeaseNotFound, lock.KindOther, ""},
		{"eof", io.EOF, lock.KindConn, ""},
	} {
		err := etcdErr(c.err)
		if got := lock.Classify(err); got != c.want {
			t.Errorf("%s: Classify(etcdErr(%v)) = %q, want %q", c.name, c.err, got, c.want)
		}
		se := (*lock.StoreError)(nil)
		if !errors.As(err, &se) {
			if c.code != "" {
				t.Errorf("%s: etcdErr(%v) is no StoreError", c.name, c.err)
			}
			continue
		}
		if c.code == "" || se.Code != c.code || se.Store != "etcd" || se.Fix == "" || se.Err != c.err {
			t.Errorf("%s: etcdErr = %+v, want code %q, store etcd, a fix, and Err the error", c.name, se, c.code)
		}
		if etcdErr(err) != err {
			t.Errorf("%s: a StoreError is wrapped again", c.name)
		}
	}
	if etcdErr(nil) != nil {
		t.Error("etcdErr(nil) is not nil")
	}
}
