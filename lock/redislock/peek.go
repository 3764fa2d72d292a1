package redislock

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/lock"
)

// peekPerMGET bounds the keys of one MGET, so that a burst's read does
// not hold the server for one long command.
const peekPerMGET = 512

// Peek implements lock.Peeker: the slots' state values in one round trip
// (MGETs of up to peekPerMGET keys; on a Cluster, whose slots' keys hash
// to different shards, one GET per slot in a pipeline), and the remaining
// lease of those running whose TTL is asked for (ttl) in a second: none
// goes out when every running slot's lease is known to outlast its
// window. States reads three keys per slot.
func (r *Store) Peek(ctx context.Context, slots []lock.Slot, ttl []bool) ([]lock.State, error) {
	if ttl != nil && len(ttl) != len(slots) {
		return nil, fmt.Errorf("lock: peek at %d slots: %d TTL flags", len(slots), len(ttl))
	}
	keys := make([]string, len(slots))
	for i, slot := range slots {
		keys[i], _ = Keys(r.prefix, slot)
	}
	values := make([]any, 0, len(slots))
	p := r.rdb.Pipeline()
	if _, cluster := r.rdb.(*redis.ClusterClient); cluster {
		gets := make([]*redis.StringCmd, len(keys))
		for i, k := range keys {
			gets[i] = p.Get(ctx, k)
		}
		if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !refused(err) {
			return nil, redisErr(fmt.Errorf("lock: peek at %d slots: %w", len(slots), err))
		}
		for _, g := range gets {
			if v, err := g.Result(); err == nil {
				values = append(values, v)
			} else {
				values = append(values, nil) // none, or a key of another type: its claim says which
			}
		}
	} else {
		var mgets []*redis.SliceCmd
		for from := 0; from < len(keys); from += peekPerMGET {
			mgets = append(mgets, p.MGet(ctx, keys[from:min(from+peekPerMGET, len(keys))]...))
		}
		if _, err := p.Exec(ctx); err != nil {
			return nil, redisErr(fmt.Errorf("lock: peek at %d slots: %w", len(slots), err))
		}
		for _, m := range mgets {
			values = append(values, m.Val()...) // nil for none, or a key of another type
		}
	}
	out := make([]lock.State, len(slots))
	var running []int
	for i, v := range values {
		s, ok := v.(string)
		if !ok {
			out[i].Status = "free"
			continue
		}
		val, _ := lock.ParseValue(s) // a foreign value reads "foreign"
		out[i].Status = val.State().Status
		if out[i].Status == "running" && (ttl == nil || ttl[i]) {
			running = append(running, i)
		}
	}
	if len(running) == 0 {
		return out, nil
	}
	p = r.rdb.Pipeline()
	ttls := make([]*redis.DurationCmd, len(running))
	for j, i := range running {
		ttls[j] = p.PTTL(ctx, keys[i])
	}
	if _, err := p.Exec(ctx); err != nil {
		return nil, redisErr(fmt.Errorf("lock: lease left of %d slots: %w", len(running), err))
	}
	for j, i := range running {
		if d := ttls[j].Val(); d > 0 {
			out[i].TTL = d
		} else {
			out[i].Status = "free" // gone since the first read
		}
	}
	return out, nil
}
