package redislock

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/lock"
)

// The Redis store classes Redis's error replies by their code, through
// its own wrapping and a Redlock's joined node errors, with the fix to
// name for each refusal; an error it cannot class passes unchanged.
func TestRedisErr(t *testing.T) {
	oom := errors.New("OOM command not allowed when used memory > 'maxmemory'. script: 0a3d, on @user_script:1.")
	for _, c := range []struct {
		name string
		err  error
		want lock.ErrorKind
		code string
	}{
		{"oom wrapped", fmt.Errorf("lock: claim t:1 (keys a, b): %w", oom), lock.KindOOM, "OOM"},
		{"noperm", errors.New("NOPERM this user has no permissions to access one of the keys used as arguments"), lock.KindNoPerm, "NOPERM"},
		{"readonly", errors.New("READONLY You can't write against a read only replica."), lock.KindReadOnly, "READONLY"},
		{"misconf", errors.New("MISCONF Redis is configured to save RDB snapshots"), lock.KindMisconf, "MISCONF"},
		{"redlock joined", fmt.Errorf("lock: claim t:1: %w: %w", ErrNoQuorum,
			errors.Join(errors.New("1 of 3"), fmt.Errorf("node 0: %w", io.EOF), fmt.Errorf("node 1: %w", oom))), lock.KindOOM, "OOM"},
		{"not replicated", fmt.Errorf("lock: claim t:1: %w", ErrNotReplicated), lock.KindNoReplicas, "NOREPLICAS"},
		{"closed", redis.ErrClosed, lock.KindConn, "conn"},
		{"store closed", errClosed, lock.KindConn, "conn"},
		{"pool timeout", redis.ErrPoolTimeout, lock.KindTimeout, "timeout"},
		{"noscript", errors.New("NOSCRIPT No matching script."), lock.KindNoScript, "NOSCRIPT"},
		{"auth", errors.New("WRONGPASS invalid username-password pair"), lock.KindAuth, "WRONGPASS"},
		{"loading", errors.New("LOADING Redis is loading the dataset in memory"), lock.KindUnavailable, "LOADING"},
		{"eof", io.EOF, lock.KindConn, ""},
		{"other", errors.New("unexpected reply [1 2]"), lock.KindOther, ""},
	} {
		err := redisErr(c.err)
		if got := lock.Classify(err); got != c.want {
			t.Errorf("%s: Classify(redisErr(%v)) = %q, want %q", c.name, c.err, got, c.want)
		}
		se := (*lock.StoreError)(nil)
		if !errors.As(err, &se) {
			if c.code != "" {
				t.Errorf("%s: redisErr(%v) is no StoreError", c.name, c.err)
			}
			continue
		}
		if se.Code != c.code || se.Store != "redis" || (se.Fix != "") != c.want.Refusal() || se.Err != c.err {
			t.Errorf("%s: redisErr = %+v, want code %s, store redis, a fix iff a refusal, and Err the error", c.name, se, c.code)
		}
		if redisErr(err) != err {
			t.Errorf("%s: a StoreError is wrapped again", c.name)
		}
	}
	if redisErr(nil) != nil {
		t.Error("redisErr(nil) is not nil")
	}
}
