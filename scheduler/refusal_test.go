package scheduler_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/slotd/slotd/internal/etcdtest"
	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/internal/testlane"
	"github.com/slotd/slotd/internal/zktest"
	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/etcdlock"
	"github.com/slotd/slotd/lock/zklock"
	"github.com/slotd/slotd/scheduler"
)

// readyz is the replica's /readyz: its status and body.
func readyz(r *replica, store lock.Store) (int, string) {
	w := httptest.NewRecorder()
	observe.Handler(observe.Daemon{Scheduler: r.sched, Store: store}).ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
	return w.Code, w.Body.String()
}

// awaitReadyz waits up to within for /readyz to answer status with a
// body holding every one of want, and returns the body.
func awaitReadyz(t *testing.T, r *replica, store lock.Store, status int, within time.Duration, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		code, body := readyz(r, store)
		has := code == status
		for _, w := range want {
			has = has && strings.Contains(body, w)
		}
		if has {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d %q after %v, want %d with %q", code, body, within, status, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A replica on an etcd cluster whose backend quota is exhausted is not
// ready, and /readyz names the store, the NOSPACE alarm and its fix; once
// the operator frees the space and disarms the alarm it is ready again.
func TestEtcdNoSpaceMakesUnready(t *testing.T) {
	testlane.Parallel(t, etcdLane)
	c := etcdtest.StartWith(t, 1, "--quota-backend-bytes", fmt.Sprint(4<<20))
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	store := etcdlock.New(cli, "slotd")
	t.Cleanup(func() { store.Close(); cli.Close() })
	l := newLedger()
	r := startReplica(t, "r1", store, time.Second, []scheduler.Task{testTask(t, "full", "@every 1s", l.job(ok), nil)},
		scheduler.WithClockCheck(200*time.Millisecond))
	awaitReadyz(t, r, store, http.StatusOK, 10*time.Second, "ready")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	value := strings.Repeat("x", 512<<10)
	for i := 0; i < 64; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("filler/%d", i), value); err != nil {
			break
		}
	}
	body := awaitReadyz(t, r, store, http.StatusServiceUnavailable, 10*time.Second,
		"the store refuses writes (etcd NOSPACE", "compact and defragment, then `etcdctl alarm disarm`", "cannot claim")
	t.Logf("/readyz on a full cluster: %s", strings.TrimSpace(body))
	if ref, ok := r.sched.Refused(); !ok || ref.Kind != lock.KindOOM || ref.Store != "etcd" {
		t.Errorf("Refused() = %+v, %v; want an etcd refusal of kind oom", ref, ok)
	}

	resp, err := cli.Delete(ctx, "filler/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Defragment(ctx, c.Endpoints()[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{}); err != nil {
		t.Fatal(err)
	}
	// The last write's refusal stands for three clock checks unless a
	// write succeeds meanwhile; the probe clears its own at once.
	awaitReadyz(t, r, store, http.StatusOK, 10*time.Second, "ready")
	l.await(t, "a slot run after the fix", 10*time.Second, func(rs []record) bool { return len(rs) >= 1 })
}

// A replica on a ZooKeeper root that belongs to another digest user is
// not ready, and /readyz names the store, NOAUTH and its fix; once the
// owner opens the root's ACL it is ready again.
func TestZooKeeperNoAuthMakesUnready(t *testing.T) {
	testlane.Parallel(t, heavyLane)
	e := zktest.Start(t, 1)
	dial := func(digest string) *zklock.Store {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := zklock.Dial(ctx, zklock.Options{Servers: e.Servers(), SessionTimeout: 5 * time.Second, Digest: digest})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	owner := dial("slotd:secret")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := owner.Time(ctx); err != nil { // creates the root and its clock node, the owner's only
		t.Fatal(err)
	}
	store := dial("intruder:pw")
	l := newLedger()
	r := startReplica(t, "r1", store, time.Second, []scheduler.Task{testTask(t, "acl", "@every 1s", l.job(ok), nil)},
		scheduler.WithClockCheck(200*time.Millisecond))
	body := awaitReadyz(t, r, store, http.StatusServiceUnavailable, 10*time.Second,
		"the store refuses writes (zookeeper NOAUTH", "[zookeeper] username and password", "cannot claim")
	t.Logf("/readyz on another user's root: %s", strings.TrimSpace(body))
	if ref, ok := r.sched.Refused(); !ok || ref.Kind != lock.KindNoPerm || ref.Store != "zookeeper" {
		t.Errorf("Refused() = %+v, %v; want a zookeeper refusal of kind noperm", ref, ok)
	}

	// The owner opens its root, as an operator would, with a client of its own.
	admin, _, err := zk.Connect(e.Servers(), 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.AddAuth("digest", []byte("slotd:secret")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{owner.Root(), owner.Root() + "/.clock"} {
		if _, err := admin.SetACL(p, zk.WorldACL(zk.PermAll), -1); err != nil {
			t.Fatal(err)
		}
	}
	awaitReadyz(t, r, store, http.StatusOK, 10*time.Second, "ready")
	l.await(t, "a slot run after the fix", 10*time.Second, func(rs []record) bool { return len(rs) >= 1 })
}

// A replica whose etcd user has no rights on the prefix is not ready, and
// /readyz names PERMISSION_DENIED and its fix (the clock read is refused
// already, before the probe); once the role is granted the prefix it is
// ready again.
func TestEtcdPermissionDeniedMakesUnready(t *testing.T) {
	testlane.Parallel(t, etcdLane)
	c := etcdtest.Start(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	connect := func(user, pw string) *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), Username: user, Password: pw, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	root := connect("", "")
	for _, step := range []func() error{
		func() error { _, err := root.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.RoleAdd(ctx, "slotd"); return err },
		func() error { _, err := root.UserAdd(ctx, "slotd", "s3cret"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "slotd", "slotd"); return err },
		func() error { _, err := root.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	store := etcdlock.New(connect("slotd", "s3cret"), "slotd")
	t.Cleanup(func() { store.Close() })
	l := newLedger()
	r := startReplica(t, "r1", store, time.Second, []scheduler.Task{testTask(t, "perm", "@every 1s", l.job(ok), nil)},
		scheduler.WithClockCheck(200*time.Millisecond))
	body := awaitReadyz(t, r, store, http.StatusServiceUnavailable, 10*time.Second,
		"the store refuses writes (etcd PERMISSION_DENIED", "grant slotd's etcd user a role with readwrite on the prefix", "cannot claim")
	t.Logf("/readyz without rights on the prefix: %s", strings.TrimSpace(body))
	if strings.Contains(body, "s3cret") {
		t.Errorf("/readyz quotes the password: %q", body)
	}

	admin := connect("root", "rootpw")
	if _, err := admin.RoleGrantPermission(ctx, "slotd", "slotd", clientv3.GetPrefixRangeEnd("slotd"), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		t.Fatal(err)
	}
	awaitReadyz(t, r, store, http.StatusOK, 10*time.Second, "ready")
	l.await(t, "a slot run after the grant", 10*time.Second, func(rs []record) bool { return len(rs) >= 1 })
}
