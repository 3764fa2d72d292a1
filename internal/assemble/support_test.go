package assemble

import (
	"fmt"
	"strings"
	"testing"
)

// No store refuses a concurrency policy or a hook at load: every store of
// slotd has the operator controls and one-time markers, Redlock included.
func TestStoreSupportRefused(t *testing.T) {
	redlock := "[redis]\nredlock = [\"redis://a:6379\", \"redis://b:6379\", \"redis://c:6379\"]\n[[task]]\nname = \"c\"\nschedule = \"@hourly\"\nplugin = \"exec\"\nconcurrency = \"replace\"\n  [task.params]\n  command = [\"true\"]\n"
	if _, err := Parse([]byte(redlock), "test.toml", nil); err != nil {
		t.Errorf("replace on Redlock: %v", err)
	}
	// On Redis, etcd and ZooKeeper both are fine; on_failure is fine on
	// every store (each has one-time markers).
	for _, src := range []string{
		"[zookeeper]\nservers = [\"zk1:2181\"]\n[[task]]\nname = \"a\"\nschedule = \"@hourly\"\nplugin = \"exec\"\nconcurrency = \"forbid\"\n  [task.params]\n  command = [\"true\"]\n",
		"[etcd]\nendpoints = [\"http://etcd1:2379\"]\n[[task]]\nname = \"b\"\nschedule = \"@hourly\"\nplugin = \"exec\"\nconcurrency = \"replace\"\n  [task.params]\n  command = [\"true\"]\n",
	} {
		if _, err := Parse([]byte(src), "test.toml", nil); err != nil {
			t.Errorf("%s\nerr = %v", src, err)
		}
	}
	hook := "[etcd]\nendpoints = [\"http://etcd1:2379\"]\n[[task]]\nname = \"e\"\nschedule = \"@hourly\"\nplugin = \"exec\"\n  [task.params]\n  command = [\"true\"]\n  [task.on_failure]\n  plugin = \"exec\"\n    [task.on_failure.params]\n    command = [\"true\"]\n"
	if _, err := Parse([]byte(hook), "test.toml", nil); err != nil {
		t.Errorf("on_failure on etcd: %v", err)
	}
	ok := "[redis]\nurl = \"redis://db:6379\"\n[[task]]\nname = \"d\"\nschedule = \"@hourly\"\nplugin = \"exec\"\nconcurrency = \"forbid\"\n  [task.params]\n  command = [\"true\"]\n"
	if _, err := Parse([]byte(ok), "test.toml", nil); err != nil {
		t.Errorf("forbid on Redis: %v", err)
	}
}

// What each store supports follows from the interfaces its Store type
// implements (lock.Controls, lock.Oncer), read without dialing it: every
// store and every key that needs one, with the refusal's wording.
func TestStoreSupportEveryStore(t *testing.T) {
	const task = "[[task]]\nname = \"t\"\nschedule = \"@hourly\"\nplugin = \"exec\"\nparams = { command = [\"true\"] }\n"
	for _, tc := range []struct {
		store           string
		name            string // as the refusal names it
		controls, oncer bool
	}{
		{"", "the embedded store", true, true},
		{"[redis]\nurl = \"redis://127.0.0.1:1\"\n", "[redis] url", true, true},
		{"[redis]\naddrs = [\"127.0.0.1:1\"]\nmaster_name = \"m\"\n", "[redis] sentinel", true, true},
		{"[redis]\naddrs = [\"127.0.0.1:1\"]\ncluster = true\n", "[redis] cluster", true, true},
		{"[redis]\nredlock = [\"redis://127.0.0.1:1\", \"redis://127.0.0.1:2\", \"redis://127.0.0.1:3\"]\n", "[redis] redlock", true, true},
		{"[etcd]\nendpoints = [\"http://127.0.0.1:1\"]\n", "[etcd]", true, true},
		{"[zookeeper]\nservers = [\"127.0.0.1:1\"]\n", "[zookeeper]", true, true},
	} {
		for _, key := range []string{`concurrency = "forbid"`, `concurrency = "replace"`, `concurrency = "queue"`, "on_failure = { plugin = \"exec\", params = { command = [\"true\"] } }"} {
			_, err := Parse([]byte(tc.store+task+key+"\n"), "test.toml", nil)
			supported := tc.controls
			want := fmt.Sprintf(`test.toml: task "t": concurrency: %q needs the store's operator controls, which %s does not have (every store of slotd has them); set concurrency = "allow" for this task`,
				strings.Trim(strings.TrimPrefix(key, "concurrency = "), `"`), tc.name)
			if strings.HasPrefix(key, "on_failure") {
				supported = tc.oncer
				want = fmt.Sprintf(`test.toml: task "t": on_failure: hooks need a one-time marker in the store, which %s does not have (every store of slotd has one); set on_failure = false for this task`, tc.name)
			}
			switch {
			case supported && err != nil:
				t.Errorf("%s with %s: %v", tc.name, key, err)
			case !supported && (err == nil || err.Error() != want):
				t.Errorf("%s with %s:\nerr  %v\nwant %s", tc.name, key, err, want)
			}
		}
	}
}
