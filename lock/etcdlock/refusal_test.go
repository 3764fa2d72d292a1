package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/etcdlock"
)

// storeError is err's StoreError, failing the test if it has none of
// kind and code.
func storeError(t *testing.T, what string, err error, kind lock.ErrorKind, code string) *lock.StoreError {
	t.Helper()
	se := (*lock.StoreError)(nil)
	if !errors.As(err, &se) || se.Kind != kind || se.Code != code || se.Store != "etcd" || se.Fix == "" {
		t.Fatalf("%s: %v (%+v), want an etcd StoreError %s %s with a fix", what, err, se, kind, code)
	}
	return se
}

// openSlot is a slot of task whose window opened two seconds ago (the
// store's clock is read in whole seconds) and is open for a minute.
func openSlot(task string) lock.Slot {
	now := time.Now()
	return lock.Slot{Task: task, ID: fmt.Sprint(now.UnixNano()), Time: now.Add(-2 * time.Second), Deadline: now.Add(time.Minute)}
}

// A cluster whose backend quota is exhausted raises the NOSPACE alarm and
// refuses every write: the probe and a claim fail with a StoreError of
// kind oom naming the fix; once the space is freed (compaction,
// defragmentation) and the alarm disarmed, both succeed again.
func TestNoSpaceIsOOM(t *testing.T) {
	c := etcdtest.StartWith(t, 1, "--quota-backend-bytes", fmt.Sprint(4<<20))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newStore(t, c.Endpoints())
	admin := client(t, c.Endpoints())
	if err := s.Probe(ctx, "r1", 10*time.Second); err != nil {
		t.Fatalf("probe before the quota is reached: %v", err)
	}
	value := strings.Repeat("x", 512<<10)
	var last error
	for i := 0; i < 64 && last == nil; i++ {
		_, last = admin.Put(ctx, fmt.Sprintf("filler/%d", i), value)
	}
	if last == nil {
		t.Fatal("64 puts of 512 KiB did not exhaust a 4 MiB quota")
	}
	t.Logf("the filler's put failed: %v", last)

	se := storeError(t, "probe on a full cluster", s.Probe(ctx, "r1", 10*time.Second), lock.KindOOM, "NOSPACE")
	if !strings.Contains(se.Fix, "alarm disarm") {
		t.Errorf("the fix %q does not name the alarm's disarm", se.Fix)
	}
	_, err := s.Claim(ctx, openSlot("full"), "r1", policy)
	storeError(t, "claim on a full cluster", err, lock.KindOOM, "NOSPACE")

	// The fix, as docs/stores.md gives it: free the space, compact,
	// defragment, disarm.
	resp, err := admin.Delete(ctx, "filler/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("delete on a full cluster: %v", err)
	}
	if _, err := admin.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Defragment(ctx, c.Endpoints()[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AlarmDisarm(ctx, &clientv3.AlarmMember{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Probe(ctx, "r1", 10*time.Second); err != nil {
		t.Errorf("probe after the fix: %v", err)
	}
	if c, err := s.Claim(ctx, openSlot("full"), "r1", policy); err != nil || c.Result != lock.Won {
		t.Errorf("claim after the fix = %+v, %v; want won", c, err)
	}
}

// With etcd auth on, a user whose role has no rights on the prefix is
// refused the probe, the clock read and a claim as a StoreError of kind
// noperm naming the fix; granting the role readwrite on the prefix lets
// all three through; deleting the user makes the probe fail as a
// StoreError of kind auth.
func TestPermissionDeniedIsNoPerm(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := client(t, c.Endpoints())
	for _, step := range []func() error{
		func() error { _, err := root.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.RoleAdd(ctx, "slotd"); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, "slotd", "other/", clientv3.GetPrefixRangeEnd("other/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, "slotd", "s3cret"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "slotd", "slotd"); return err },
		func() error { _, err := root.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	user := func(name, pw string) *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second,
			Username: name, Password: pw, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	s := etcdlock.New(user("slotd", "s3cret"), "slotd")
	t.Cleanup(func() { s.Close() })

	se := storeError(t, "probe without rights", s.Probe(ctx, "r1", 10*time.Second), lock.KindNoPerm, "PERMISSION_DENIED")
	if strings.Contains(se.Error(), "s3cret") || strings.Contains(se.Fix, "s3cret") {
		t.Errorf("the refusal quotes the password: %v", se)
	}
	_, err := s.Time(ctx)
	storeError(t, "time without rights", err, lock.KindNoPerm, "PERMISSION_DENIED")
	_, err = s.Claim(ctx, openSlot("perm"), "r1", policy)
	storeError(t, "claim without rights", err, lock.KindNoPerm, "PERMISSION_DENIED")

	admin := user("root", "rootpw")
	if _, err := admin.RoleGrantPermission(ctx, "slotd", "slotd", clientv3.GetPrefixRangeEnd("slotd"), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		t.Fatal(err)
	}
	if err := s.Probe(ctx, "r1", 10*time.Second); err != nil {
		t.Errorf("probe after the grant: %v", err)
	}
	if _, err := s.Time(ctx); err != nil {
		t.Errorf("time after the grant: %v", err)
	}
	if c, err := s.Claim(ctx, openSlot("perm"), "r1", policy); err != nil || c.Result != lock.Won {
		t.Errorf("claim after the grant = %+v, %v; want won", c, err)
	}

	// The user deleted under a running store: its token is no longer
	// valid, and the client's new authentication fails.
	if _, err := admin.UserDelete(ctx, "slotd"); err != nil {
		t.Fatal(err)
	}
	err = s.Probe(ctx, "r1", 10*time.Second)
	se = (*lock.StoreError)(nil)
	if !errors.As(err, &se) || se.Kind != lock.KindAuth || se.Store != "etcd" || !strings.Contains(se.Fix, "[etcd] username") {
		t.Fatalf("probe after the user's deletion: %v (%+v), want an etcd StoreError of kind auth with the fix", err, se)
	}
	t.Logf("probe after the user's deletion: %s %s: %v", se.Kind, se.Code, se)
}
