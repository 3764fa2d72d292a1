package zklock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/internal/zktest"
	"github.com/slotd/slotd/lock"
	zklock "github.com/slotd/slotd/lock/zklock"
)

// With digest auth ([zookeeper] username and password) the store's nodes
// are its user's only: a client without those credentials, or with a
// wrong password, can neither read nor delete them, while a second store
// of the same user shares the slots.
func TestDigestAuthKeepsNodesTheUsers(t *testing.T) {
	e := zktest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := func(digest string) *zklock.Store { return dialWith(t, e, zklock.Options{Digest: digest}) }
	a, b := store("slotd:secret"), store("slotd:secret")
	p := shortLease
	slot := openSlot(ctx, t, a, "1")
	if c, err := a.Claim(ctx, slot, "a", p); err != nil || c.Result != lock.Won {
		t.Fatalf("a's claim = %+v, %v; want won", c, err)
	}
	if c, err := b.Claim(ctx, slot, "b", p); err != nil || c.Result != lock.Held || c.Holder != "a" {
		t.Fatalf("b's claim (same user) = %+v, %v; want held by a", c, err)
	}

	client := func(digest string) *zk.Conn {
		c, _, err := zk.Connect(e.Servers(), 10*time.Second, zk.WithLogInfo(false))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		if digest != "" {
			if err := c.AddAuth("digest", []byte(digest)); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
	for name, c := range map[string]*zk.Conn{"no credentials": client(""), "a wrong password": client("slotd:guess")} {
		for _, path := range []string{a.Root(), a.TaskPath(slot.Task), a.SlotPath(slot), a.RunPath(slot)} {
			if _, _, err := c.Get(path); !errors.Is(err, zk.ErrNoAuth) {
				t.Errorf("a client with %s read %s: %v, want ErrNoAuth", name, path, err)
			}
		}
		if err := c.Delete(a.RunPath(slot), -1); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("a client with %s deleted the run node: %v, want ErrNoAuth", name, err)
		}
	}
	if _, _, err := client("slotd:secret").Get(a.RunPath(slot)); err != nil {
		t.Errorf("a client of the store's user read the run node: %v", err)
	}
	if err := a.Complete(ctx, slot, lock.Owner{ID: "a", Attempt: 1}, p.DoneTTL); err != nil {
		t.Fatal(err)
	}
	if c, err := b.Claim(ctx, slot, "b", p); err != nil || c.Result != lock.Done {
		t.Fatalf("b's claim after a's completion = %+v, %v; want done", c, err)
	}
}

// A store whose digest user has no rights on the root's nodes (they were
// created by another user) is refused the clock read, the probe and a
// claim as a StoreError of kind noperm (ZooKeeper NOAUTH) naming the fix;
// once the owner opens the nodes' ACL, the clock read and the probe pass.
func TestNoAuthIsNoPerm(t *testing.T) {
	e := zktest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	owner := dialWith(t, e, zklock.Options{Digest: "slotd:secret"})
	slot := openSlot(ctx, t, owner, "1") // creates the root and its clock node, the owner's only
	if err := owner.Probe(ctx, "owner", 10*time.Second); err != nil {
		t.Fatalf("the owner's probe: %v", err)
	}
	other := dialWith(t, e, zklock.Options{Digest: "intruder:pw"})

	refused := func(what string, err error) {
		t.Helper()
		se := (*lock.StoreError)(nil)
		if !errors.As(err, &se) || se.Kind != lock.KindNoPerm || se.Code != "NOAUTH" || se.Store != "zookeeper" ||
			!strings.Contains(se.Fix, "[zookeeper] username and password") || !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("%s by another user: %v (%+v), want a zookeeper StoreError noperm NOAUTH with the fix", what, err, se)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the refusal quotes the owner's password: %v", what, err)
		}
	}
	_, err := other.Time(ctx)
	refused("time", err)
	refused("probe", other.Probe(ctx, "other", 10*time.Second))
	_, err = other.Claim(ctx, slot, "other", shortLease)
	refused("claim", err)

	for _, p := range []string{owner.Root(), owner.Root() + "/.clock"} {
		if _, err := owner.Conn().SetACL(p, zk.WorldACL(zk.PermAll), -1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.Time(ctx); err != nil {
		t.Errorf("time after the ACL was opened: %v", err)
	}
	if err := other.Probe(ctx, "other", 10*time.Second); err != nil {
		t.Errorf("probe after the ACL was opened: %v", err)
	}
}
