package zklock

import (
	"errors"

	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/lock"
)

// The ZooKeeper refusals this store classes, with what an operator does
// about each. An ACL denial (NOAUTH: the nodes are another digest user's,
// or a user without the permission) is a missing permission; a failed
// digest authentication is a missing authentication. The go-zookeeper
// client has no error value for NOTREADONLY (-119, a write sent to a member
// in read-only mode): it answers "unknown error: -119".
const (
	noAuthFix = "the ZooKeeper ACL denies slotd's user the root's nodes: set [zookeeper] username and password " +
		"to the user that created them, or grant that user ALL on them (setAcl) (docs/stores.md)"
	authFailedFix = "ZooKeeper rejected slotd's digest credentials: check [zookeeper] username and password (docs/stores.md)"
	readOnlyFix   = "the ZooKeeper member is in read-only mode, cut off from its quorum: restore the quorum, " +
		"or list only members of it in [zookeeper] servers"
	notReadOnly = "unknown error: -119"
)

// zkErr wraps err in a *lock.StoreError when it is a ZooKeeper refusal
// this store classes anywhere in its chain. Any other err, nil included,
// is returned as it is. Every client call's error passes through it (see
// call), so that the store's own wrapping keeps the StoreError in its
// chain.
func zkErr(err error) error {
	if err == nil {
		return nil
	}
	if se := (*lock.StoreError)(nil); errors.As(err, &se) {
		return err
	}
	switch {
	case errors.Is(err, zk.ErrNoAuth):
		return &lock.StoreError{Kind: lock.KindNoPerm, Store: "zookeeper", Code: "NOAUTH", Fix: noAuthFix, Err: err}
	case errors.Is(err, zk.ErrAuthFailed):
		return &lock.StoreError{Kind: lock.KindAuth, Store: "zookeeper", Code: "AUTHFAILED", Fix: authFailedFix, Err: err}
	case hasMessage(err, notReadOnly):
		return &lock.StoreError{Kind: lock.KindReadOnly, Store: "zookeeper", Code: "NOTREADONLY", Fix: readOnlyFix, Err: err}
	}
	return err
}

// hasMessage reports whether an error in err's chain (joined errors
// included) reads msg exactly.
func hasMessage(err error, msg string) bool {
	for err != nil {
		if err.Error() == msg {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if hasMessage(e, msg) {
					return true
				}
			}
			return false
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		default:
			return false
		}
	}
	return false
}
