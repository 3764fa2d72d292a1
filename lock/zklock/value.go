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
// "<attempts>\n<base>\n<TTL ms>\n<done value>". The TTL is the one the
// node was created with, which ZooKeeper does not show its clients.
type slotData struct {
	attempts, base int
	ttl            time.Duration
	done           string // "" until the slot is completed
}

func (d slotData) encode() []byte {
	return []byte(strconv.Itoa(d.attempts) + "\n" + strconv.Itoa(d.base) + "\n" +
		strconv.FormatInt(d.ttl.Milliseconds(), 10) + "\n" + d.done)
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
		if st, err := parseState(d.done); err != nil || st.Status != "done" {
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
