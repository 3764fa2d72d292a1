package redislock

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/lock"
)

// A Redis error reply's first word is its code; the codes slotd classes,
// with what an operator does about each refusal.
var redisCodes = map[string]struct {
	kind lock.ErrorKind
	fix  string
}{
	"OOM":         {lock.KindOOM, "raise maxmemory or free memory"},
	"NOPERM":      {lock.KindNoPerm, "grant the Redis ACL user slotd's commands (EVALSHA, EVAL, TIME, SUBSCRIBE) on the prefix's keys (~<prefix>:*) and channels (see docs/stores.md)"},
	"READONLY":    {lock.KindReadOnly, "point slotd at the master, not a read-only replica (or use Sentinel)"},
	"MISCONF":     {lock.KindMisconf, "Redis stopped writes after a failed RDB save: fix its disk or persistence settings"},
	"NOREPLICAS":  {lock.KindNoReplicas, noReplicasFix},
	"NOSCRIPT":    {lock.KindNoScript, ""},
	"NOAUTH":      {lock.KindAuth, redisAuthFix},
	"WRONGPASS":   {lock.KindAuth, redisAuthFix},
	"LOADING":     {lock.KindUnavailable, ""},
	"BUSY":        {lock.KindUnavailable, ""},
	"MASTERDOWN":  {lock.KindUnavailable, ""},
	"CLUSTERDOWN": {lock.KindUnavailable, ""},
	"TRYAGAIN":    {lock.KindUnavailable, ""},
}

const redisAuthFix = "Redis does not authenticate slotd: check the URL's username and password against its ACL (ACL GETUSER)"

const noReplicasFix = "too few Redis replicas acknowledge writes (min-replicas-to-write, min_replicas_ack): bring them back"

// redisErr wraps err in a *StoreError when it is a failure this store can
// class: a Redis error reply anywhere in its chain (by its code), a write
// the replicas did not acknowledge (ErrNotReplicated), or a closed client
// or pool. Any other err, nil included, is returned as it is. Every error
// the Redis store returns passes through it.
func redisErr(err error) error {
	if err == nil {
		return nil
	}
	if se := (*lock.StoreError)(nil); errors.As(err, &se) {
		return err // classed already (a node of a Redlock, a nested call)
	}
	if code := redisCode(err); code != "" {
		c := redisCodes[code]
		return &lock.StoreError{Kind: c.kind, Store: "redis", Code: code, Fix: c.fix, Err: err}
	}
	switch {
	case errors.Is(err, ErrNotReplicated):
		// A claim that the replicas did not acknowledge fails closed, as
		// every claim will until they come back.
		return &lock.StoreError{Kind: lock.KindNoReplicas, Store: "redis", Code: "NOREPLICAS", Fix: noReplicasFix, Err: err}
	case errors.Is(err, redis.ErrPoolTimeout), strings.Contains(err.Error(), "pool timeout"):
		return &lock.StoreError{Kind: lock.KindTimeout, Store: "redis", Code: "timeout", Err: err}
	case errors.Is(err, redis.ErrClosed), errors.Is(err, errClosed), strings.Contains(err.Error(), "client is closed"):
		return &lock.StoreError{Kind: lock.KindConn, Store: "redis", Code: "conn", Err: err}
	}
	return err
}

// redisCode walks err's chain for an error whose message starts with a
// known Redis error code, and returns the code.
func redisCode(err error) string {
	for err != nil {
		code, _, _ := strings.Cut(err.Error(), " ")
		if _, ok := redisCodes[code]; ok {
			return code
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if c := redisCode(e); c != "" {
					return c
				}
			}
			return ""
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		default:
			return ""
		}
	}
	return ""
}
