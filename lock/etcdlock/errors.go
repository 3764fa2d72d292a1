package etcdlock

import (
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/slotd/slotd/lock"
)

// The etcd errors this store classes, by the server's description (what
// rpctypes.ErrorDesc reads, the same whether the client returned the gRPC
// status or its EtcdError), with what an operator does about each.
var etcdCodes = map[string]etcdClass{
	rpctypes.ErrorDesc(rpctypes.ErrGRPCNoSpace): {lock.KindOOM, "NOSPACE",
		"etcd's backend quota is exhausted: compact and defragment, then `etcdctl alarm disarm` (docs/stores.md)"},
	rpctypes.ErrorDesc(rpctypes.ErrGRPCPermissionDenied): {lock.KindNoPerm, "PERMISSION_DENIED",
		"grant slotd's etcd user a role with readwrite on the prefix (`etcdctl role grant-permission --prefix <role> readwrite <prefix>`, docs/stores.md)"},
	rpctypes.ErrorDesc(rpctypes.ErrGRPCInvalidAuthToken): {lock.KindAuth, "INVALID_AUTH_TOKEN", etcdAuthFix},
	rpctypes.ErrorDesc(rpctypes.ErrGRPCUserNotFound):     {lock.KindAuth, "USER_NOT_FOUND", etcdAuthFix},
	rpctypes.ErrorDesc(rpctypes.ErrGRPCAuthFailed):       {lock.KindAuth, "AUTH_FAILED", etcdAuthFix},
}

// etcdClass is how the store classes one etcd error.
type etcdClass struct {
	kind lock.ErrorKind
	code string // as slotd names it: "NOSPACE", "PERMISSION_DENIED", ...
	fix  string
}

const etcdAuthFix = "etcd does not authenticate slotd's user: check [etcd] username and password against `etcdctl user get` (docs/stores.md)"

// etcdErr wraps err in a *lock.StoreError when etcd answered it with an
// error this store classes (see etcdCodes) anywhere in its chain. Any
// other err, nil included, is returned as it is. Every error a Store
// method returns passes through it.
func etcdErr(err error) error {
	if err == nil {
		return nil
	}
	if se := (*lock.StoreError)(nil); errors.As(err, &se) {
		return err
	}
	if c, ok := etcdCode(err); ok {
		return &lock.StoreError{Kind: c.kind, Store: "etcd", Code: c.code, Fix: c.fix, Err: err}
	}
	return err
}

// etcdCode walks err's chain (joined errors included) for an etcd error
// whose description etcdCodes knows.
func etcdCode(err error) (c etcdClass, ok bool) {
	for err != nil {
		if c, ok = etcdCodes[rpctypes.ErrorDesc(err)]; ok {
			return c, true
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if c, ok = etcdCode(e); ok {
					return c, true
				}
			}
			return c, false
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		default:
			return c, false
		}
	}
	return c, false
}
