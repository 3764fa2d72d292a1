package redislock

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/scheduler/history"
)

// Config is what Open and OpenRedlock build a backend from, beside its
// clients.
type Config struct {
	Prefix string // of every key (see the package doc)
	// MinReplicasAck, when positive, has Open's store wait for that many
	// replicas to acknowledge each write (WithMinReplicasAck), each wait
	// bounded by AckTimeout. A Redlock quorum has no replicas to wait for.
	MinReplicasAck int
	AckTimeout     time.Duration
	HistoryTTL     time.Duration // each history stream's TTL (NewHistory)
}

// Open returns the store on rdb (one server, a Sentinel-managed master or
// a Cluster) and the run history beside its slots: what slotd's daemon
// runs on a [redis] url or addrs configuration. On one server or Sentinel
// the history appends a success's entry with its completion, in one script
// (History.CompleteRecorded). It does no I/O. Close the
// history, then the store, then rdb.
func Open(rdb redis.UniversalClient, c Config) (*Store, *History) {
	var opts []Option
	if c.MinReplicasAck > 0 {
		opts = append(opts, WithMinReplicasAck(c.MinReplicasAck, c.AckTimeout))
	}
	s, h := New(rdb, c.Prefix, opts...), NewHistory(rdb, c.Prefix, c.HistoryTTL)
	if s.ack.n == 0 && s.batch.fuse { // one server: a success's entry rides on its completion
		h.beside = s
	}
	return s, h
}

// OpenRedlock returns the slot protocol on a quorum of independent masters,
// one client each (NewRedlock), and the run history kept on every one of
// them (MultiHistory): what slotd's daemon runs on a [redis] redlock
// configuration. It does no I/O. Close the history, then the store, then
// the clients.
func OpenRedlock(nodes []redis.UniversalClient, c Config) (*Redlock, *MultiHistory, error) {
	clients := make([]Client, len(nodes))
	hists := make([]history.History, len(nodes))
	for i, n := range nodes {
		clients[i], hists[i] = n, NewHistory(n, c.Prefix, c.HistoryTTL)
	}
	m := NewMultiHistory(hists...)
	s, err := NewRedlock(clients, c.Prefix)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	return s, m, nil
}
