// Package archtest checks the package layering that ARCHITECTURE.md
// describes, with `go list`, so that a change which couples the engine to a
// backend or a leaf to the engine fails in CI rather than in review.
package archtest

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/slotd/slotd"

type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Standard     bool
}

// list runs `go list -json` with args and decodes every package it prints.
func list(t *testing.T, args ...string) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.String())
	}
	return pkgs
}

func hasPrefix(paths []string, prefix string) []string {
	var hit []string
	for _, p := range paths {
		if p == prefix || strings.HasPrefix(p, prefix+"/") {
			hit = append(hit, p)
		}
	}
	return hit
}

// The engine fires, claims and runs; it reaches Redis, TOML and the
// Prometheus exposition only through the packages that own them.
func TestEngineImportsNoBackend(t *testing.T) {
	p := list(t, mod+"/scheduler")[mod+"/scheduler"]
	for _, banned := range []string{"github.com/redis/go-redis", "github.com/BurntSushi/toml", "github.com/prometheus", mod + "/internal/config", mod + "/internal/store", mod + "/internal/observe"} {
		if hit := hasPrefix(p.Imports, banned); len(hit) > 0 {
			t.Errorf("scheduler imports %v: the engine must not depend on %s", hit, banned)
		}
	}
}

// Leaves import nothing of ours above them: lock, retry, tasks, the
// schedule math and the history's vocabulary (and their tests) never reach
// the engine, config, store, observation, the commands or the integration
// suite. The store packages under lock write their histories with
// scheduler/history, a leaf.
func TestLeavesDoNotImportTheEngine(t *testing.T) {
	leaves := []string{mod + "/lock", mod + "/retry", mod + "/tasks", mod + "/scheduler/schedule", mod + "/scheduler/history"}
	above := func(d string) bool {
		if d == mod+"/scheduler/schedule" || d == mod+"/scheduler/history" || strings.HasPrefix(d, mod+"/scheduler/history/") {
			return false
		}
		for _, a := range []string{mod + "/scheduler", mod + "/internal/config", mod + "/internal/store", mod + "/internal/observe", mod + "/cmd", mod + "/integration"} {
			if d == a || strings.HasPrefix(d, a+"/") {
				return true
			}
		}
		return false
	}
	for path, p := range list(t, leaves[0]+"/...", leaves[1]+"/...", leaves[2]+"/...", leaves[3]+"/...", leaves[4]+"/...") {
		for _, d := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
			if above(d) {
				t.Errorf("%s imports %s", path, d)
			}
		}
	}
}

// The schedule math is a leaf on robfig/cron and the standard library.
func TestScheduleMathIsALeaf(t *testing.T) {
	pkgs := list(t, "-deps", mod+"/scheduler/schedule")
	for path, p := range pkgs {
		if p.Standard || path == mod+"/scheduler/schedule" || strings.HasPrefix(path, "github.com/robfig/cron") {
			continue
		}
		t.Errorf("scheduler/schedule depends on %s", path)
	}
}

// The history's vocabulary (entry, interface, bounds, the memory history)
// is a leaf on the standard library alone, so that the engine and every
// store package can share it without reaching each other.
func TestHistoryIsALeaf(t *testing.T) {
	for path, p := range list(t, "-deps", mod+"/scheduler/history") {
		if !p.Standard && path != mod+"/scheduler/history" {
			t.Errorf("scheduler/history depends on %s", path)
		}
	}
}

// The slot protocol names no store: package lock, and its tests, depend on
// no store's client, directly or through another package (the stores are
// packages of their own, lock/redislock, lock/etcdlock, ...).
func TestLockImportsNoStoreClient(t *testing.T) {
	clients := []string{"github.com/redis/go-redis", "go.etcd.io/etcd", "github.com/go-zookeeper/zk"}
	for path := range list(t, "-deps", "-test", mod+"/lock") {
		for _, c := range clients {
			if len(hasPrefix([]string{path}, c)) > 0 {
				t.Errorf("package lock or its tests depend on %s: the protocol must not know a store's client", path)
			}
		}
	}
}

// One package reads the configuration file format, and Redis clients are
// built only where the store is assembled (lock/redislock and lock/mutex
// hold the scripts, lock/internal/redisx their shared plumbing; config
// validates URLs with the parser the clients use; the command line routes
// go-redis's logger and takes hooks for the load tool).
func TestOneOwnerPerDependency(t *testing.T) {
	owners := map[string][]string{
		"github.com/BurntSushi/toml": {mod + "/internal/config", mod + "/tasks"},
		"github.com/redis/go-redis":  {mod + "/lock/redislock", mod + "/lock/mutex", mod + "/lock/internal/redisx", mod + "/internal/store", mod + "/internal/config", mod + "/cmd/slotd/cli", mod + "/internal/redistest", mod + "/internal/redisfloor", mod + "/cmd/slotd-load", mod + "/integration"},
	}
	pkgs := list(t, "./...")
	for path, p := range pkgs {
		for dep, allowed := range owners {
			if len(hasPrefix(p.Imports, dep)) == 0 {
				continue
			}
			if !slices.ContainsFunc(allowed, func(a string) bool { return path == a || strings.HasPrefix(path, a+"/") }) {
				t.Errorf("%s imports %s; only %v may", path, dep, allowed)
			}
		}
	}
}

// The configuration is data: internal/config reads and validates the file
// and imports no engine package — not the scheduler, the plugins, a slot
// store, the store's assembly or the observation. What it cannot check by
// itself it asks through its Checker (internal/assemble).
func TestConfigImportsNoEngine(t *testing.T) {
	p := list(t, mod+"/internal/config")[mod+"/internal/config"]
	engine := []string{mod + "/scheduler", mod + "/tasks", mod + "/lock", mod + "/internal/store", mod + "/internal/observe", mod + "/internal/stats", mod + "/internal/assemble"}
	for _, d := range p.Imports {
		if d == mod+"/scheduler/schedule" { // the cron math, a leaf
			continue
		}
		for _, banned := range engine {
			if d == banned || strings.HasPrefix(d, banned+"/") {
				t.Errorf("internal/config imports %s: the configuration must not depend on the engine", d)
			}
		}
	}
}
