package zklock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/kv"
)

// Errors of this store, besides the lock package's.
var (
	// ErrLeaseOverSession: a claim asked for a lease longer than the
	// session timeout, which would let the session (and so the claim)
	// expire before the watchdog stops the task. Nothing was written.
	ErrLeaseOverSession = errors.New("zklock: lease longer than the session timeout")
	// ErrNoTTL: the servers refuse TTL nodes; run them with
	// zookeeper.extendedTypesEnabled=true.
	ErrNoTTL = errors.New("zklock: the servers refuse TTL nodes (start them with -Dzookeeper.extendedTypesEnabled=true)")
)

// Options configure Dial and Open.
type Options struct {
	Servers        []string      // host:port of each member
	SessionTimeout time.Duration // asked of the ensemble; it may grant less (see Store.SessionTimeout)
	Root           string        // path under which every node lives; "/slotd" if empty
	// Digest is "user:password" for ZooKeeper's digest scheme; when set,
	// the store's nodes are created readable and writable by that user only.
	Digest string
	Logger *slog.Logger // the client's own messages, at debug; none if nil
	Dialer zk.Dialer    // how to reach a member (tests put a proxy between); net.DialTimeout if nil
	// HistoryTTL is how long an entry of the run history lives (Open).
	HistoryTTL time.Duration
}

// Store is a lock.Store on ZooKeeper; see the package doc. It owns its
// client connection and session.
type Store struct {
	conn    *zk.Conn
	root    string
	acl     []zk.ACL
	timeout atomic.Int64 // negotiated session timeout, ns
	// granted is signalled each time a session is established and its
	// timeout read (clientLog): the client logs the timeout only after it
	// reports the session, so Dial waits for this, not for the session
	// event, before SessionTimeout can be trusted.
	granted chan struct{}
	log     *slog.Logger

	clock sync.Mutex
	seen  reading // the last reading of the leader's clock
	// epoch is the newest leader's epoch this store has had a write
	// stamped by, and epochSince the earliest stamp it has seen of that
	// leader's: the leader took over no later than that (leaseLeft).
	epoch      int64
	epochSince time.Time
	reading    sync.Mutex // held while a claim takes a new reading: one at a time

	watch watcher
	rels  releases // the release notices' watch (releases.go)
	tally tallyLog // this process's recent tallies, each replica's node's data (tally.go)

	// doubt holds, by run node path, each claim whose outcome was unknown
	// (an error after its multi-op was sent), until a later claim of the
	// slot finds it landed or the slot node past the version it checked.
	doubt sync.Map
	// holds holds, by run node path, what each claim this store won
	// wrote (*hold, holds.go), until its Complete or Release.
	holds sync.Map
	// orphans holds, by run node path, the run value of each release that
	// failed with the node perhaps still in place (see Release).
	orphans sync.Map

	// The fleet and the operator controls over package kv's primitive
	// (fleet.go, controls.go), built once in Dial.
	kvFleet    *kv.Fleet
	kvControls *kv.Controls
}

// reading is one reading of the leader's clock: the mtime of a write,
// with the local monotonic times the write was sent and answered, and the
// epoch of the leader that stamped it (the high half of the write's zxid).
type reading struct {
	mtime      time.Time
	sent, recv time.Time
	epoch      int64
}

// epochOf is the leader epoch of a zxid: its high 32 bits, which every
// newly elected leader increments.
func epochOf(zxid int64) int64 { return zxid >> 32 }

// Dial connects to the ensemble and waits, within ctx, for a session.
func Dial(ctx context.Context, o Options) (*Store, error) {
	if len(o.Servers) == 0 {
		return nil, errors.New("zklock: no servers")
	}
	if o.SessionTimeout <= 0 {
		return nil, fmt.Errorf("zklock: session timeout %v: must be positive", o.SessionTimeout)
	}
	root := o.Root
	if root == "" {
		root = "/slotd"
	}
	if !strings.HasPrefix(root, "/") || strings.HasSuffix(root, "/") {
		return nil, fmt.Errorf("zklock: root %q: must start with / and not end with one", root)
	}
	s := &Store{root: root, acl: zk.WorldACL(zk.PermAll), log: o.Logger, granted: make(chan struct{}, 1)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.timeout.Store(int64(o.SessionTimeout))
	s.watch.init(s)
	s.rels.init(s)
	s.kvFleet = kv.NewFleet(zkKV{s}, true)
	s.kvControls = kv.NewControls(zkKV{s}, s.Time, s.arm)
	opts := []func(*zk.Conn){
		zk.WithLogger(clientLog{s}), zk.WithLogInfo(true),
		zk.WithEventCallback(s.watch.event),
	}
	if o.Dialer != nil {
		opts = append(opts, zk.WithDialer(o.Dialer))
	}
	conn, _, err := zk.Connect(o.Servers, o.SessionTimeout, func(c *zk.Conn) {
		for _, f := range opts {
			f(c)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("zklock: connect to %v: %w", o.Servers, err)
	}
	s.conn = conn
	if o.Digest != "" {
		if err := conn.AddAuth("digest", []byte(o.Digest)); err != nil {
			conn.Close()
			return nil, fmt.Errorf("zklock: digest auth: %w", err)
		}
		s.acl = zk.AuthACL(zk.PermAll)
	}
	select {
	case <-s.granted:
	case <-ctx.Done():
		conn.Close()
		return nil, fmt.Errorf("zklock: no session with %v: %w", o.Servers, context.Cause(ctx))
	}
	s.watch.start()
	return s, nil
}

// Close stops the watches and closes the session, which frees every slot
// this store holds at once.
func (s *Store) Close() error {
	s.rels.close()
	s.watch.close()
	s.conn.Close()
	s.rels.wait()
	return nil
}

// SessionTimeout is the session timeout the ensemble granted: a claim
// whose lease is longer is refused (ErrLeaseOverSession).
func (s *Store) SessionTimeout() time.Duration { return time.Duration(s.timeout.Load()) }

// SessionID is the current session's id (0 while there is none).
func (s *Store) SessionID() int64 { return s.conn.SessionID() }

// Root is the path under which the store keeps its nodes.
func (s *Store) Root() string { return s.root }

// clientLog takes the client's messages: the granted session timeout
// (which the client does not otherwise expose) and, at debug, the rest.
type clientLog struct{ s *Store }

func (l clientLog) Printf(format string, args ...any) {
	if format == "authenticated: id=%d, timeout=%d" && len(args) == 2 {
		if ms, ok := args[1].(int32); ok && ms > 0 {
			l.s.timeout.Store(int64(time.Duration(ms) * time.Millisecond))
		}
		select {
		case l.s.granted <- struct{}{}:
		default:
		}
		return
	}
	l.s.log.Debug("zookeeper client: " + fmt.Sprintf(format, args...))
}

// escape makes a task name or slot id one path element that cannot be
// "." or "..", nor start with "." (the store's own nodes do).
func escape(name string) string {
	e := url.PathEscape(name)
	if e == "" || e[0] == '.' {
		e = "%2E" + e[min(len(e), 1):]
		if name == "" {
			e = "%00"
		}
	}
	return e
}

// TaskPath is the node under which a task's slots live.
func (s *Store) TaskPath(task string) string { return s.root + "/" + escape(task) }

// SlotPath is slot's slot node (attempts, base, done marker).
func (s *Store) SlotPath(slot lock.Slot) string { return s.TaskPath(slot.Task) + "/" + escape(slot.ID) }

// RunPath is slot's run node (the running claim).
func (s *Store) RunPath(slot lock.Slot) string { return s.SlotPath(slot) + "/run" }

func (s *Store) clockPath() string { return s.root + "/.clock" }

// call runs f, a blocking client call, until it returns or ctx ends (the
// call then finishes on its own, its result unread). f's error, if it is
// a refusal (zkErr), comes back as a *lock.StoreError: every call of the
// store and of the history beside it passes here.
func call[T any](ctx context.Context, f func() (T, error)) (T, error) {
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, context.Cause(ctx)
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, zkErr(r.err)
	case <-ctx.Done():
		var zero T
		return zero, context.Cause(ctx)
	}
}

// ensure creates the task's container (or, with no task, the root), and
// the root first only if it is missing too: a burst of new tasks makes a
// container each, under a root that exists.
func (s *Store) ensure(ctx context.Context, task string) error {
	create := func(p string) error {
		_, err := call(ctx, func() (string, error) { return s.conn.CreateContainer(p, nil, zk.FlagContainer, s.acl) })
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("zklock: create %s: %w", p, err)
		}
		return nil
	}
	if task == "" {
		return create(s.root)
	}
	err := create(s.TaskPath(task))
	if errors.Is(err, zk.ErrNoNode) {
		if err = create(s.root); err == nil {
			err = create(s.TaskPath(task))
		}
	}
	return err
}

// createTTL creates a TTL node (and the containers above it if they are
// missing); an existing node is not an error. created says whether this
// call made it.
func (s *Store) createTTL(ctx context.Context, task, path string, data []byte, ttl time.Duration) (created bool, err error) {
	for try := 0; ; try++ {
		_, err := call(ctx, func() (string, error) { return s.conn.CreateTTL(path, data, zk.FlagTTL, s.acl, ttl) })
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, zk.ErrNodeExists):
			return false, nil
		case errors.Is(err, zk.ErrNoNode) && try < 3:
			if err := s.ensure(ctx, task); err != nil {
				return false, err
			}
		case errors.Is(err, zk.ErrUnknown), errors.Is(err, zk.ErrBadArguments):
			return false, fmt.Errorf("zklock: create %s: %w (%w)", path, ErrNoTTL, err)
		default:
			return false, fmt.Errorf("zklock: create %s: %w", path, err)
		}
	}
}

// Time implements lock.Store: the leader's clock, as the mtime it stamps on
// a write of the clock node.
func (s *Store) Time(ctx context.Context) (time.Time, error) {
	path := s.clockPath()
	for try := 0; ; try++ {
		sent := time.Now()
		st, err := call(ctx, func() (*zk.Stat, error) { return s.conn.Set(path, nil, -1) })
		if err == nil {
			r := reading{mtime: time.UnixMilli(st.Mtime).UTC(), sent: sent, recv: time.Now(), epoch: epochOf(st.Mzxid)}
			s.note(r)
			return r.mtime, nil
		}
		if !errors.Is(err, zk.ErrNoNode) || try > 0 {
			return time.Time{}, fmt.Errorf("zklock: time (write %s): %w", path, err)
		}
		if _, err := s.createTTL(ctx, "", path, nil, ClockTTL); err != nil {
			return time.Time{}, fmt.Errorf("zklock: time: %w", err)
		}
	}
}

// note keeps r as the latest reading of the leader's clock, and its
// leader's epoch if it is the newest seen.
func (s *Store) note(r reading) {
	s.clock.Lock()
	if r.recv.After(s.seen.recv) {
		s.seen = r
	}
	switch {
	case r.epoch > s.epoch:
		s.epoch, s.epochSince = r.epoch, r.mtime
	case r.epoch == s.epoch && r.mtime.Before(s.epochSince):
		s.epochSince = r.mtime
	}
	s.clock.Unlock()
}

// readingMaxAge is how old a reading of the leader's clock may be before a
// claim takes a new one: the local clock's rate drifts by parts per
// million (a millisecond in 30s at 30 ppm); its offset is never used. Every
// won claim is a new reading, and is checked against its own mtime anyway.
const readingMaxAge = 30 * time.Second

// now bounds the leader's clock: at least lo, at most hi, by the latest
// reading (taken anew if older than readingMaxAge) and the monotonic time
// elapsed since.
func (s *Store) now(ctx context.Context) (lo, hi time.Time, err error) {
	return s.nowAfter(ctx, time.Time{})
}

// nowAfter is now by a reading whose write was sent at or after t (by the
// local monotonic clock), taken anew if the latest is older: one that
// knows of every election before t (see leaseLeft).
func (s *Store) nowAfter(ctx context.Context, t time.Time) (lo, hi time.Time, err error) {
	last := func() reading {
		s.clock.Lock()
		defer s.clock.Unlock()
		return s.seen
	}
	stale := func(r reading) bool {
		return r.recv.IsZero() || time.Since(r.recv) > readingMaxAge || r.sent.Before(t)
	}
	r := last()
	if stale(r) {
		// The claims of a burst share one new reading.
		s.reading.Lock()
		if r = last(); stale(r) {
			if _, err := s.Time(ctx); err != nil {
				s.reading.Unlock()
				return time.Time{}, time.Time{}, err
			}
			r = last()
		}
		s.reading.Unlock()
	}
	return r.mtime.Add(time.Since(r.recv)), r.mtime.Add(time.Since(r.sent)), nil
}
