package redislock

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/lock"
	"github.com/slotd/slotd/lock/internal/kv"
	"github.com/slotd/slotd/lock/internal/quorum"
)

// The key-value primitive of package kv (kv.Store) on a Redlock quorum,
// for the operator controls. Each master keeps, per name, a record with
// its version, its value and the version and value it replaced, under the
// name's own TTL; each directory has an index of its names:
//
//	slotd:kv:<dir>/<name>  JSON {id, v, del, pid, pv, pdel, px} (TTL the entry's)
//	slotd:kv:<dir>         sorted set of the names, scored by expiry, node ms (TTL the longest entry's)
//
// A write's version is a fresh random id, the same on every master. Put
// from version v runs a compare-and-set from v on every master, and holds
// when a quorum applied it: a master applies at most one write from v
// (until an undo takes that write back), so two writers from v cannot both
// reach a quorum. A writer that did not reach one undoes its write where
// it landed (only while the master still holds it) and answers false — or,
// when too many masters did not answer to tell, an error: the outcome is
// unknown. A writer that did reach one brings the masters that refused it
// (one was down, or holds an undone loser) to its write, from what each
// held: the next write then finds a full quorum again.
//
// A read asks every master and answers the version a quorum holds (an
// absent, expired or deleted name counts as version 0 on its master); when
// none does — a master missed the name's last write (it was down) and
// another is down now — it fails with ErrNoQuorum naming the entry, until
// that master is back; the next write of the name then repairs the stale
// one. A read does not repair: it cannot tell a stale master from one a
// write is landing on, and setting that one back to the version it left
// would let it apply a second write from that version. kv.Controls
// compares versions for equality only, which random ids serve.

var (
	//go:embed redlock_kv_read.lua
	kvReadLua    string
	kvReadScript = redis.NewScript(kvReadLua)
	//go:embed redlock_kv_put.lua
	kvPutLua    string
	kvPutScript = redis.NewScript(kvPutLua)
	//go:embed redlock_kv_undo.lua
	kvUndoLua    string
	kvUndoScript = redis.NewScript(kvUndoLua)
)

// redlockKV is kv.Store on the masters of r.
type redlockKV struct{ r *Redlock }

var _ kv.Store = redlockKV{}

// kvRecord is one master's record of a name (redlock_kv_put.lua).
type kvRecord struct {
	ID  string `json:"id"`
	V   string `json:"v"`
	Del bool   `json:"del"`
}

// kvSeen is a name as one master holds it.
type kvSeen struct {
	version int64 // 0: absent, expired or deleted
	value   string
	ttl     time.Duration
}

func (k redlockKV) index(dir string) string { return k.r.nodes[0].prefix + ":kv:" + dir }

func (k redlockKV) key(dir, name string) string { return k.index(dir) + "/" + name }

// readNode reads dir on n (only name, if not "").
func (k redlockKV) readNode(ctx context.Context, n *Store, dir, name string) (map[string]kvSeen, error) {
	res, err := kvReadScript.Run(ctx, n.rdb, []string{k.index(dir)}, k.index(dir)+"/", name).Slice()
	if err != nil {
		return nil, redisErr(fmt.Errorf("lock: read %s (key %s): %w", dir, k.index(dir), err))
	}
	out := make(map[string]kvSeen, len(res)/3)
	for i := 0; i+2 < len(res); i += 3 {
		nm, _ := res[i].(string)
		raw, _ := res[i+1].(string)
		ttl, _ := res[i+2].(int64)
		var rec kvRecord
		id, perr := int64(0), json.Unmarshal([]byte(raw), &rec)
		if perr == nil {
			id, perr = strconv.ParseInt(rec.ID, 10, 64)
		}
		if perr != nil {
			return nil, fmt.Errorf("lock: read %s (key %s): %w: %q", dir, k.key(dir, nm), lock.ErrForeign, raw)
		}
		if rec.Del || ttl <= 0 {
			continue
		}
		out[nm] = kvSeen{version: id, value: rec.V, ttl: time.Duration(ttl) * time.Millisecond}
	}
	return out, nil
}

// agreed is the entry of name that a quorum of the answers holds: ok false
// when none does.
func (k redlockKV) agreed(answers []map[string]kvSeen, name string) (e kv.Entry, ok bool) {
	votes := map[int64]int{}
	for _, a := range answers {
		if a != nil {
			votes[a[name].version]++
		}
	}
	for v, n := range votes {
		if n < k.r.quorum() {
			continue
		}
		for _, a := range answers {
			if s := a[name]; a != nil && s.version == v {
				e = kv.Entry{Value: s.value, Version: v, TTL: max(e.TTL, s.ttl)}
			}
		}
		if v == 0 {
			e = kv.Entry{}
		}
		return e, true
	}
	return kv.Entry{}, false
}

// read reads dir (only name, if not "") on every master until a quorum
// agrees on every name read, or every master has answered, and returns
// each master's answer (nil: no answer) and the names read.
func (k redlockKV) read(ctx context.Context, dir, name string) ([]map[string]kvSeen, map[string]bool, error) {
	settled := func(res []quorum.Result[map[string]kvSeen], answered []bool) bool {
		ok, failed := tally(res, answered)
		if ok+failed == len(k.r.nodes) || failed > len(k.r.nodes)-k.r.quorum() {
			return true
		}
		if ok < k.r.quorum() {
			return false
		}
		answers, names := answersOf(res, answered, name)
		for nm := range names {
			if _, agreed := k.agreed(answers, nm); !agreed {
				return false
			}
		}
		return true
	}
	res := quorum.FanOutUntil(ctx, k.r.nodes, k.r.nodeTimeout(0), func(ctx context.Context, n *Store) (map[string]kvSeen, error) {
		return k.readNode(ctx, n, dir, name)
	}, settled)
	answered := make([]bool, len(res))
	var errs []error
	ok := 0
	for i, nr := range res {
		if answered[i] = nr.Err == nil; answered[i] {
			ok++
		} else {
			errs = append(errs, fmt.Errorf("node %d: %w", i, nr.Err))
		}
	}
	if ok < k.r.quorum() {
		return nil, nil, fmt.Errorf("lock: read %s: %d of %d nodes answered: %w: %w", dir, ok, len(k.r.nodes), ErrNoQuorum, errors.Join(errs...))
	}
	answers, names := answersOf(res, answered, name)
	return answers, names, nil
}

// answersOf is the answers of the nodes that answered (nil for the
// others), and every name any of them holds (and name, if not "").
func answersOf(res []quorum.Result[map[string]kvSeen], answered []bool, name string) ([]map[string]kvSeen, map[string]bool) {
	answers := make([]map[string]kvSeen, len(res))
	names := map[string]bool{}
	if name != "" {
		names[name] = true
	}
	for i, nr := range res {
		if answered[i] && nr.Err == nil {
			answers[i] = nr.Val
			if answers[i] == nil {
				answers[i] = map[string]kvSeen{}
			}
			for nm := range nr.Val {
				names[nm] = true
			}
		}
	}
	return answers, names
}

// Get implements kv.Store: the version a quorum of masters holds.
func (k redlockKV) Get(ctx context.Context, dir, name string) (kv.Entry, error) {
	answers, _, err := k.read(ctx, dir, name)
	if err != nil {
		return kv.Entry{}, err
	}
	e, ok := k.agreed(answers, name)
	if !ok {
		return kv.Entry{}, k.split(dir, name, answers)
	}
	return e, nil
}

// List implements kv.Store: every name a quorum of masters holds live.
func (k redlockKV) List(ctx context.Context, dir string) (map[string]kv.Entry, error) {
	answers, names, err := k.read(ctx, dir, "")
	if err != nil {
		return nil, err
	}
	out := make(map[string]kv.Entry, len(names))
	var errs []error
	for nm := range names {
		e, ok := k.agreed(answers, nm)
		switch {
		case !ok:
			errs = append(errs, k.split(dir, nm, answers))
		case e.Version != 0:
			out[nm] = e
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// split is the error of a read on which no quorum agrees.
func (k redlockKV) split(dir, name string, answers []map[string]kvSeen) error {
	s := ""
	for i, a := range answers {
		if a != nil {
			s += fmt.Sprintf("; node %d: version %d", i, a[name].version)
		}
	}
	return fmt.Errorf("lock: read %s/%s (key %s): no %d of %d nodes agree%s: %w",
		dir, name, k.key(dir, name), k.r.quorum(), len(k.r.nodes), s, ErrNoQuorum)
}

// newVersion is a fresh write's version: random, never 0.
func newVersion() int64 { return rand.Int64N(1<<63-1) + 1 }

// Put implements kv.Store (see the layout above).
func (k redlockKV) Put(ctx context.Context, dir, name, value string, version int64, ttl time.Duration) (bool, error) {
	if ttl <= 0 {
		return false, fmt.Errorf("lock: write %s/%s: TTL %v must be positive", dir, name, ttl)
	}
	return k.write(ctx, dir, name, value, version, ttl, false)
}

// Delete implements kv.Store: a write of a deleted mark.
func (k redlockKV) Delete(ctx context.Context, dir, name string, version int64) (bool, error) {
	return k.write(ctx, dir, name, "", version, 0, true)
}

// putNode runs redlock_kv_put.lua on n: whether it wrote, and the version
// n holds otherwise.
func (k redlockKV) putNode(ctx context.Context, n *Store, dir, name, value string, from, to int64, ttl time.Duration, del bool) (bool, int64, error) {
	d := "0"
	if del {
		d = "1"
	}
	res, err := kvPutScript.Run(ctx, n.rdb, []string{k.key(dir, name), k.index(dir)},
		strconv.FormatInt(from, 10), strconv.FormatInt(to, 10), value, ttl.Milliseconds(), d, n.channel, name).Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		return false, 0, redisErr(fmt.Errorf("lock: write %s/%s (key %s): %w", dir, name, k.key(dir, name), err))
	}
	done, _ := res[0].(int64)
	s, _ := res[1].(string)
	held, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return false, 0, fmt.Errorf("lock: write %s/%s (key %s): unexpected reply %v", dir, name, k.key(dir, name), res)
	}
	return done == 1, held, nil
}

type putReply struct {
	wrote bool
	held  int64
}

// write is Put and Delete.
func (k redlockKV) write(ctx context.Context, dir, name, value string, from int64, ttl time.Duration, del bool) (bool, error) {
	to := newVersion()
	res := all(ctx, k.r, 0, func(ctx context.Context, n *Store) (putReply, error) {
		w, held, err := k.putNode(ctx, n, dir, name, value, from, to, ttl, del)
		return putReply{w, held}, err
	})
	wrote := 0
	var errs []error
	for i, nr := range res {
		switch {
		case nr.Err != nil:
			errs = append(errs, fmt.Errorf("node %d: %w", i, nr.Err))
		case nr.Val.wrote:
			wrote++
		}
	}
	q := k.r.quorum()
	if wrote >= q {
		k.repair(ctx, dir, name, value, to, ttl, del, res)
		return true, nil
	}
	// Lost, or unknown: take the write back wherever it may have landed.
	undone := all(context.WithoutCancel(ctx), k.r, 0, func(ctx context.Context, n *Store) (struct{}, error) {
		i := k.r.index(n)
		if res[i].Err == nil && !res[i].Val.wrote {
			return struct{}{}, nil // refused it: nothing to take back
		}
		err := kvUndoScript.Run(ctx, n.rdb, []string{k.key(dir, name), k.index(dir)}, strconv.FormatInt(to, 10), n.channel, name).Err()
		return struct{}{}, redisErr(err)
	})
	maybe := 0 // nodes that may still hold the write
	for i, u := range undone {
		if u.Err != nil && (res[i].Err != nil || res[i].Val.wrote) {
			maybe++
			errs = append(errs, fmt.Errorf("node %d: undo: %w", i, u.Err))
		}
	}
	if maybe >= q {
		return false, fmt.Errorf("lock: write %s/%s (key %s): written on %d of %d nodes, %d may hold it: outcome unknown: %w: %w",
			dir, name, k.key(dir, name), wrote, len(k.r.nodes), maybe, ErrNoQuorum, errors.Join(errs...))
	}
	return false, nil
}

// repair brings the masters that answered a won write with another
// version to it, from the version each held: a master that missed writes
// (it was down) or holds a losing writer's write it did not take back.
// A failure leaves the master as it was, for the next write to repair.
func (k redlockKV) repair(ctx context.Context, dir, name, value string, to int64, ttl time.Duration, del bool, res []quorum.Result[putReply]) {
	var stale []*Store
	for i, nr := range res {
		if nr.Err == nil && !nr.Val.wrote {
			stale = append(stale, k.r.nodes[i])
		}
	}
	if len(stale) == 0 {
		return
	}
	quorum.FanOut(context.WithoutCancel(ctx), stale, k.r.nodeTimeout(0), func(ctx context.Context, n *Store) (bool, error) {
		w, _, err := k.putNode(ctx, n, dir, name, value, res[k.r.index(n)].Val.held, to, ttl, del)
		return w, err
	})
}

// OnMembers implements kv.Store: the index key's notices on every master.
func (k redlockKV) OnMembers(dir string, f func()) (stop func()) {
	return k.on(k.index(dir), f)
}

// OnChange implements kv.Store: the name key's notices on every master,
// once a quorum of the masters confirmed the subscription (a write lands
// on a quorum, so on a master that confirmed it).
func (k redlockKV) OnChange(dir, name string, f func()) (stop func()) {
	return k.on(k.key(dir, name), f)
}

func (k redlockKV) on(key string, f func()) (stop func()) {
	relay := lock.NewWatch(func() {})
	relay.OnChange(func(lock.Change) { f() })
	// Confirmed before the watches start them unconfirmed; a master not
	// confirmed is go-redis's to resubscribe.
	ctx, cancel := context.WithTimeout(context.Background(), k.r.nodeTimeout(0))
	defer cancel()
	_ = k.r.Subscribe(ctx)
	subs := make([]*lock.Watch, len(k.r.nodes))
	for i, n := range k.r.nodes {
		subs[i] = n.watchKey(key, relay)
	}
	return func() {
		for _, s := range subs {
			s.Stop()
		}
	}
}

// index is n's position among the masters.
func (r *Redlock) index(n *Store) int {
	for i, m := range r.nodes {
		if m == n {
			return i
		}
	}
	return -1
}
