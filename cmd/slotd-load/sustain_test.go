package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// The sustained mode's flags: its defaults, and the burst mode's flags it
// refuses.
func TestSustainedFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"-plugin", "http"}, "-rate 0"},
		{[]string{"-rate", "100", "-plugin", "exec"}, `-plugin "exec"`},
		{[]string{"-rate", "100", "-tasks", "10"}, "-tasks does not apply"},
		{[]string{"-rate", "100", "-crash", "0"}, "-crash does not apply"},
		{[]string{"-rate", "100", "-duration", "1500ms"}, "-duration 1.5s: want a whole number of -every (1s)"},
		{[]string{"-rate", "100", "-warmup", "0"}, "-warmup 0"},
		{[]string{"-floor"}, "-floor apply with -rate"},
		{[]string{"-rate", "10", "-floor", "-store", "etcd"}, "-floor with -store etcd"},
		{[]string{"-rate", "100000", "-floor", "-duration", "1m"}, "-floor: 6500000 slots"},
	} {
		// run validates the flags before it starts anything.
		var stderr strings.Builder
		if code := run(tc.args, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
	o := options{rate: 10, replicas: 3, batch: 256, burstLease: 15 * time.Second, sample: time.Second, plugin: pluginNoop,
		set: map[string]bool{"rate": true}}
	if err := o.validate(); err != nil || o.warmup != 5 || o.duration != time.Minute || o.every != time.Second {
		t.Errorf("defaults: warm-up %d s, duration %v, every %v, err %v; want 5 s, 1m and 1s", o.warmup, o.duration, o.every, err)
	}
}

// -store and -endpoints: the stores it knows, endpoints only for etcd and
// ZooKeeper, and only in sustained mode.
func TestStoreFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"-rate", "10", "-store", "mysql"}, `-store "mysql"`},
		{[]string{"-rate", "10", "-endpoints", "127.0.0.1:2181"}, "with -store cluster, etcd or zookeeper only"},
		{[]string{"-store", "etcd"}, "sustained mode"},
	} {
		var stderr strings.Builder
		if code := run(tc.args, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
	for _, store := range []string{storeEtcd, storeZooKeeper} {
		o := options{rate: 10, replicas: 3, batch: 256, burstLease: 15 * time.Second, sample: time.Second, plugin: pluginNoop,
			store: store, endpoints: []string{"127.0.0.1:1"}, set: map[string]bool{"rate": true, "store": true, "endpoints": true}}
		if err := o.validate(); err != nil {
			t.Errorf("-store %s -endpoints: %v", store, err)
		}
	}
}

// Each due time's start delays are summarised on their own: the median,
// least and worst of their p99s, and the list while it is short.
func TestDueTimesSummarisedApart(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	byDue := map[time.Time][]time.Duration{}
	for i, worst := range []time.Duration{300, 100, 200} { // ms: the due times' slowest start
		for j := range 100 {
			d := time.Duration(j) * time.Millisecond
			if j >= 98 { // two, so that the nearest-rank p99 is one
				d = worst * time.Millisecond
			}
			byDue[at.Add(time.Duration(i)*time.Second)] = append(byDue[at.Add(time.Duration(i)*time.Second)], d)
		}
	}
	got := summariseDues(byDue)
	if got.N != 3 || got.P99Median != 200 || got.P99Min != 100 || got.P99Max != 300 || got.P50Median != 49 {
		t.Errorf("summary = %+v; want 3 due times, p99 median 200, min 100, max 300, p50 median 49", got)
	}
	if want := []float64{300, 100, 200}; !slices.Equal(got.P99s, want) {
		t.Errorf("p99s = %v, want %v (in due order)", got.P99s, want)
	}
	if none := summariseDues(nil); none.N != 0 || none.P99s != nil {
		t.Errorf("no due times: %+v, want zero", summariseDues(nil))
	}
}
