package main

import (
	"io"
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
