package zklock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/lock"
)

var _ lock.Peeker = (*Store)(nil)

// Tallies on ZooKeeper: one TTL node per replica id,
// <root>/.tally/<replica>, whose data is its TTL in ms on the first line
// (as a kv node's) and then its latest talliesKept tallies, "<fire unix
// ms> <sum>" a line, oldest first. A write replaces the data (the writer
// keeps the lines), so its TTL counts from the replica's latest tally: a
// replica id that stops writing, crashed or gone for good, leaves no node
// past it. A deferring replica reads one node per claimant per check.

// talliesKept is how many fire times a replica's node remembers: a
// deferral is read within seconds of its fire time.
const talliesKept = 16

// maxTallyData bounds a tally node's data as read: talliesKept lines of a
// unix ms and a uint64, and the TTL's.
const maxTallyData = 64 * (talliesKept + 1)

// tallyLog is what this process has written to each replica id's node.
type tallyLog struct {
	mu     sync.Mutex // held across a write: one at a time, so none lands stale
	recent map[string][]tallyLine
}

type tallyLine struct {
	at  int64
	sum uint64
}

func (s *Store) tallyDir() string { return s.root + "/.tally" }

func (s *Store) tallyPath(replica string) string { return s.tallyDir() + "/" + escape(replica) }

// Tally implements lock.Peeker: the replica's node rewritten with its
// latest tallies, created as a TTL node of ttl if it is missing.
func (s *Store) Tally(ctx context.Context, at time.Time, replica string, sum uint64, ttl time.Duration) error {
	s.tally.mu.Lock()
	defer s.tally.mu.Unlock()
	if s.tally.recent == nil {
		s.tally.recent = map[string][]tallyLine{}
	}
	ms := at.UnixMilli()
	lines := s.tally.recent[replica]
	i := len(lines)
	for j, l := range lines {
		if l.at == ms {
			i = j
		}
	}
	if i == len(lines) {
		lines = append(lines, tallyLine{at: ms})
		if len(lines) > talliesKept {
			lines = lines[len(lines)-talliesKept:]
			i = len(lines) - 1
		}
	}
	lines[i].sum = sum
	s.tally.recent[replica] = lines
	var b strings.Builder
	b.WriteString(strconv.FormatInt(ttl.Milliseconds(), 10))
	for _, l := range lines {
		fmt.Fprintf(&b, "\n%d %d", l.at, l.sum)
	}
	data, p := []byte(b.String()), s.tallyPath(replica)
	for try := 0; ; try++ {
		_, err := call(ctx, func() (*zk.Stat, error) { return s.conn.Set(p, data, -1) })
		if !errors.Is(err, zk.ErrNoNode) || try == 3 {
			if err != nil {
				return fmt.Errorf("zklock: tally %s: %w", p, err)
			}
			return nil
		}
		_, err = call(ctx, func() (string, error) { return s.conn.CreateTTL(p, data, zk.FlagTTL, s.acl, ttl) })
		switch {
		case err == nil:
			return nil
		case errors.Is(err, zk.ErrNodeExists): // created meanwhile: set it
		case errors.Is(err, zk.ErrNoNode):
			for _, c := range []string{s.root, s.tallyDir()} {
				_, err := call(ctx, func() (string, error) { return s.conn.CreateContainer(c, nil, zk.FlagContainer, s.acl) })
				if err != nil && !errors.Is(err, zk.ErrNodeExists) {
					return fmt.Errorf("zklock: tally: create %s: %w", c, err)
				}
			}
		case errors.Is(err, zk.ErrUnknown), errors.Is(err, zk.ErrBadArguments):
			return fmt.Errorf("zklock: tally %s: %w (%w)", p, ErrNoTTL, err)
		default:
			return fmt.Errorf("zklock: tally %s: %w", p, err)
		}
	}
}

// Tallies implements lock.Peeker: each replica's node, read together
// (one session pipelines them).
func (s *Store) Tallies(ctx context.Context, at time.Time, replicas []string) ([]uint64, error) {
	sums := make([]uint64, len(replicas))
	ms := at.UnixMilli()
	if err := readAll(len(replicas), func(i int) (err error) {
		sums[i], err = s.readTally(ctx, s.tallyPath(replicas[i]), ms)
		return err
	}); err != nil {
		return nil, err
	}
	return sums, nil
}

// readTally is the sum the node at p holds for the fire time ms, 0 if
// none (or no node).
func (s *Store) readTally(ctx context.Context, p string, ms int64) (uint64, error) {
	data, err := call(ctx, func() ([]byte, error) {
		b, _, err := s.conn.Get(p)
		return b, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("zklock: read tally %s: %w", p, err)
	}
	if len(data) > maxTallyData {
		return 0, fmt.Errorf("zklock: tally %s: %d bytes, more than a tally's %d: %w", p, len(data), maxTallyData, lock.ErrForeign)
	}
	lines := strings.Split(string(data), "\n")
	for _, l := range lines[1:] {
		a, v, ok := strings.Cut(l, " ")
		n, aerr := strconv.ParseInt(a, 10, 64)
		sum, serr := strconv.ParseUint(v, 10, 64)
		if !ok || aerr != nil || serr != nil {
			return 0, fmt.Errorf("zklock: tally %s: line %.60q is not a fire time and a sum: %w", p, l, lock.ErrForeign)
		}
		if n == ms {
			return sum, nil
		}
	}
	return 0, nil
}
