package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// attempt is one probe run, from a replica's S and E lines.
type attempt struct {
	replica    string
	n          int
	start, end int64 // unix ns; end 0 while it runs (or if its replica died)
	ok         bool
}

// slotRuns are the attempts of one slot of one task, across replicas.
type slotRuns struct {
	task     string
	slot     int64 // unix ns
	attempts []*attempt
}

type counterSample struct{ at, trips, cmds int64 }

// records gathers what the replicas wrote. One goroutine (the tool's main)
// owns it.
type records struct {
	slots    map[string]*slotRuns
	claimAt  int64            // the burst slot whose claims are kept (unix s); 0: none yet
	claims   map[string]int64 // replica + " " + state key → first answer, unix ns
	claimed  map[string]bool  // state keys claimed by any replica
	counters map[string][]counterSample
	peaks    map[string]goPeaks // replica → peaks of the Go runtime over its life
	tails    []*tail
	sink     *sink // sustained mode with the http plugin: its requests are the attempts
	// window is the sustained mode's slots [from, to) (unix ns);
	// inWindow counts the tick slots in it that ran.
	window   [2]int64
	inWindow int
}

// goPeaks is what a replica's RSS is made of, at the peak of each.
type goPeaks struct {
	HeapMB     float64 `json:"peak_heap_mb"`   // Go heap objects
	StacksMB   float64 `json:"peak_stacks_mb"` // goroutine stacks
	Goroutines uint64  `json:"peak_goroutines"`
}

type tail struct {
	replica string
	path    string
	off     int64
	partial []byte
}

func newRecords(reps []*replica) *records {
	r := &records{slots: map[string]*slotRuns{}, claims: map[string]int64{}, claimed: map[string]bool{}, counters: map[string][]counterSample{}, peaks: map[string]goPeaks{}}
	for _, rep := range reps {
		r.tails = append(r.tails, &tail{replica: rep.id, path: rep.records})
	}
	return r
}

// poll reads what the replicas wrote, and the sink received, since the
// last poll.
func (r *records) poll() error {
	if r.sink != nil {
		for _, h := range r.sink.take() {
			s := r.slot(h.task, h.slot)
			s.attempts = append(s.attempts, &attempt{replica: h.replica, n: h.attempt, start: h.at, end: h.at, ok: true})
		}
	}
	for _, t := range r.tails {
		f, err := os.Open(t.path)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return err
		}
		_, err = f.Seek(t.off, io.SeekStart)
		var data []byte
		if err == nil {
			data, err = io.ReadAll(f)
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("records of %s: %w", t.replica, err)
		}
		t.off += int64(len(data))
		data = append(t.partial, data...)
		last := bytes.LastIndexByte(data, '\n')
		if last < 0 {
			t.partial = data
			continue
		}
		t.partial = append([]byte(nil), data[last+1:]...)
		for line := range strings.SplitSeq(string(data[:last]), "\n") {
			if err := r.parse(t.replica, line); err != nil {
				return fmt.Errorf("records of %s: %w", t.replica, err)
			}
		}
	}
	return nil
}

func (r *records) parse(replica, line string) error {
	f := strings.Fields(line)
	if len(f) == 0 {
		return nil
	}
	num := func(i int) int64 {
		if i >= len(f) {
			return 0
		}
		n, _ := strconv.ParseInt(f[i], 10, 64)
		return n
	}
	switch {
	case f[0] == "S" && len(f) == 5:
		s := r.slot(f[1], num(2))
		s.attempts = append(s.attempts, &attempt{replica: replica, n: int(num(3)), start: num(4)})
	case f[0] == "X" && len(f) == 5:
		s := r.slot(f[1], num(2))
		s.attempts = append(s.attempts, &attempt{replica: replica, n: int(num(3)), start: num(4), end: num(4), ok: true})
	case f[0] == "E" && len(f) == 6:
		s := r.slot(f[1], num(2))
		for _, a := range s.attempts {
			if a.replica == replica && a.n == int(num(3)) {
				a.end, a.ok = num(4), f[5] == "ok"
			}
		}
	case f[0] == "C" && len(f) == 3:
		task, at, ok := parseStateKey(f[1])
		if !ok || r.claimAt == 0 || at.Unix() != r.claimAt || !strings.HasPrefix(task, burstPrefix) {
			return nil
		}
		k := replica + " " + f[1]
		if _, seen := r.claims[k]; !seen {
			r.claims[k] = num(2)
		}
		r.claimed[f[1]] = true
	case f[0] == "R" && len(f) == 4:
		r.counters[replica] = append(r.counters[replica], counterSample{num(1), num(2), num(3)})
	case f[0] == "M" && len(f) == 4:
		p := r.peaks[replica]
		p.HeapMB = max(p.HeapMB, float64(num(1))/(1<<20))
		p.StacksMB = max(p.StacksMB, float64(num(2))/(1<<20))
		p.Goroutines = max(p.Goroutines, uint64(num(3)))
		r.peaks[replica] = p
	default:
		return fmt.Errorf("bad line %q", line)
	}
	return nil
}

func (r *records) slot(task string, slot int64) *slotRuns {
	k := task + " " + strconv.FormatInt(slot, 10)
	s := r.slots[k]
	if s == nil {
		s = &slotRuns{task: task, slot: slot}
		r.slots[k] = s
		if slot >= r.window[0] && slot < r.window[1] && strings.HasPrefix(task, tickPrefix) {
			r.inWindow++
		}
	}
	return s
}

// get returns the runs of task's slot at t, or nil.
func (r *records) get(task string, t time.Time) *slotRuns {
	return r.slots[task+" "+strconv.FormatInt(t.UnixNano(), 10)]
}

// countersAt is replica's hook counters as of t: the last sample at or
// before t (for a window's start) or the first at or after it (for its end).
func (r *records) countersAt(replica string, t time.Time, after bool) (counterSample, bool) {
	cs := r.counters[replica]
	i := sort.Search(len(cs), func(i int) bool { return cs[i].at >= t.UnixNano() })
	if after {
		if i < len(cs) {
			return cs[i], true
		}
		return counterSample{}, false
	}
	if i > 0 {
		return cs[i-1], true
	}
	return counterSample{}, false
}

// parseStateKey takes "<prefix>:{<task>:<slot id>}" with a second-level
// slot id apart.
func parseStateKey(key string) (task string, at time.Time, ok bool) {
	open, end := strings.IndexByte(key, '{'), strings.LastIndexByte(key, '}')
	if open < 0 || end < open {
		return "", time.Time{}, false
	}
	task, id, ok := strings.Cut(key[open+1:end], ":")
	if !ok {
		return "", time.Time{}, false
	}
	at, err := time.Parse("20060102150405", id)
	return task, at, err == nil
}
