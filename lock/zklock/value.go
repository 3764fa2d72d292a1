package zklock

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/slotd/slotd/lock"
)

// slotData is the slot node's data:
// "<attempts>\n<base>\n<TTL ms>\n<done value or backoff value>". The TTL
// is the one the node was created with, which ZooKeeper does not show its
// clients. A backoff value ("backoff:<unix ms>", lock.Value) is what a
// release with a retry backoff leaves: no claim before then by the
// leader's clock; the next claim's write clears it.
type slotData struct {
	attempts, base int
	ttl            time.Duration
	done           string    // "" until the slot is completed
	notBefore      time.Time // a retry backoff's end; zero: none
}

func (d slotData) encode() []byte {
	last := d.done
	if last == "" && !d.notBefore.IsZero() {
		last = lock.Value{NotBefore: d.notBefore}.String()
	}
	return []byte(strconv.Itoa(d.attempts) + "\n" + strconv.Itoa(d.base) + "\n" +
		strconv.FormatInt(d.ttl.Milliseconds(), 10) + "\n" + last)
}

// decodeSlot reads a slot node's data; anything else is foreign.
func decodeSlot(b []byte) (slotData, error) {
	parts := strings.Split(string(b), "\n")
	if len(parts) != 4 {
		return slotData{}, fmt.Errorf("slot node %w: %q", lock.ErrForeign, b)
	}
	a, err1 := strconv.Atoi(parts[0])
	base, err2 := strconv.Atoi(parts[1])
	ttl, err3 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || a < 0 || base < 0 || base > a || ttl <= 0 {
		return slotData{}, fmt.Errorf("slot node %w: %q", lock.ErrForeign, b)
	}
	d := slotData{attempts: a, base: base, ttl: time.Duration(ttl) * time.Millisecond, done: parts[3]}
	if d.done != "" {
		v, err := lock.ParseValue(d.done)
		switch {
		case err == nil && !v.NotBefore.IsZero():
			d.done, d.notBefore = "", v.NotBefore
		case err != nil || !v.Done:
			return slotData{}, fmt.Errorf("slot node %w: %q", lock.ErrForeign, b)
		}
	}
	return d, nil
}

// node is one read of a node.
type node struct {
	data   []byte
	stat   *zk.Stat
	exists bool
	// expired: a run node whose lease ran out by the leader's clock (see
	// runData); claims take it over.
	expired bool
}

// SlotTTL is what is left, at now by the leader's clock, of the TTL of a
// slot node with data b and stat st (0 if the data is not a slot node's).
func SlotTTL(b []byte, st *zk.Stat, now time.Time) time.Duration {
	d, err := decodeSlot(b)
	if err != nil || st == nil {
		return 0
	}
	return d.ttl - now.Sub(time.UnixMilli(st.Mtime))
}

// ClockTTL is the TTL of the clock node, which every reading of the
// leader's clock refreshes.
const ClockTTL = time.Hour

// runData is the run node's data: "run:<owner>:<attempt>\n<lease ms>".
// The lease is the claim's Policy.Lease: the claim's holder stops its
// task a lease (less a tenth) after it sent its last confirmed renewal, and
// every renewal rewrites the node, so a run node whose mtime is a lease old
// by the leader's clock is a lost lease, whatever its session does (see
// expired). A run node without a lease (written by a release of slotd
// before it recorded one) is held for as long as its session lives.
type runData struct {
	value string        // the state value, "run:<owner>:<attempt>"
	lease time.Duration // 0: not recorded
}

func (r runData) encode() []byte {
	return []byte(r.value + "\n" + strconv.FormatInt(r.lease.Milliseconds(), 10))
}

// decodeRun splits a run node's data; the value is parsed by the caller
// (lock.ParseValue), so a foreign value reads as foreign there.
func decodeRun(b []byte) runData {
	value, ms, ok := strings.Cut(string(b), "\n")
	if !ok {
		return runData{value: value}
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n <= 0 {
		return runData{value: string(b)} // foreign as a whole
	}
	return runData{value: value, lease: time.Duration(n) * time.Millisecond}
}

// leaseLeft is what is left, at now by the leader's clock, of the lease of
// the run node read as run; ok is false if the node records no lease. The
// lease counts from the node's mtime: the leader's stamp of the claim or
// of its last renewal. A node last written under an older leader than the
// newest this store has seen counts it from that leader's earliest stamp
// seen here, if later: while there was no leader the holder could neither
// renew nor complete, and its session was given a fresh timeout by the new
// one, so its lease is not judged run out before it has had a whole one
// under the new leader (a completion retried past its lease lands first).
// The stamp seen is never earlier than the new leader's start, so the
// holder gets no less; a holder frozen through an election is taken over
// at most a lease later than it would have been.
func (s *Store) leaseLeft(run node, now time.Time) (left time.Duration, ok bool) {
	r := decodeRun(run.data)
	if r.lease <= 0 || run.stat == nil {
		return 0, false
	}
	from := time.UnixMilli(run.stat.Mtime)
	s.clock.Lock()
	if epochOf(run.stat.Mzxid) < s.epoch && s.epochSince.After(from) {
		from = s.epochSince
	}
	s.clock.Unlock()
	return from.Add(r.lease).Sub(now), true
}
