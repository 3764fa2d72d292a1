package zklock

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/lock"
)

// The store classes ZooKeeper's refusals through its own wrapping and
// joined errors, with the fix to name: an ACL denial is a missing
// permission, failed digest credentials a missing authentication, and a
// write sent to a read-only member (NOTREADONLY, which the client reports
// only by its code) a read-only store. Any other error passes unchanged.
func TestZkErr(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want lock.ErrorKind
		code string
	}{
		{"noauth", fmt.Errorf("zklock: claim payroll:1: %w", zk.ErrNoAuth), lock.KindNoPerm, "NOAUTH"},
		{"auth failed", fmt.Errorf("x: %w", errors.Join(io.EOF, zk.ErrAuthFailed)), lock.KindAuth, "AUTHFAILED"},
		{"read-only member", fmt.Errorf("zklock: time (write /slotd/.clock): %w", errors.New("unknown error: -119")), lock.KindReadOnly, "NOTREADONLY"},
		{"other unknown code", errors.New("unknown error: -120"), lock.KindOther, ""},
		{"bad version", zk.ErrBadVersion, lock.KindOther, ""},
		{"eof", io.EOF, lock.KindConn, ""},
	} {
		err := zkErr(c.err)
		if got := lock.Classify(err); got != c.want {
			t.Errorf("%s: Classify(zkErr(%v)) = %q, want %q", c.name, c.err, got, c.want)
		}
		se := (*lock.StoreError)(nil)
		if !errors.As(err, &se) {
			if c.code != "" {
				t.Errorf("%s: zkErr(%v) is no StoreError", c.name, c.err)
			}
			continue
		}
		if c.code == "" || se.Code != c.code || se.Store != "zookeeper" || se.Fix == "" || se.Err != c.err {
			t.Errorf("%s: zkErr = %+v, want code %q, store zookeeper, a fix, and Err the error", c.name, se, c.code)
		}
		if zkErr(err) != err {
			t.Errorf("%s: a StoreError is wrapped again", c.name)
		}
	}
	if zkErr(nil) != nil {
		t.Error("zkErr(nil) is not nil")
	}
}
