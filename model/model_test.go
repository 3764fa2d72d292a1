package model

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// notMirrored are the lock scripts slot.pml does not model: the Mutex's
// and Redlock's own (docs/model.md, Scope). A new script must be added
// either here or to scripts.sha256 (and to the model).
var notMirrored = map[string]bool{
	"lock/redislock/announce.lua":        true, // replica presence, not the slot protocol
	"lock/redislock/probe.lua":           true, // the readiness write probe, on a key of its own
	"lock/redislock/live.lua":            true, // the fleet's live set: who claims first, not whether it is safe
	"lock/redislock/history_read.lua":    true, // reads the run history, a record beside the slots
	"lock/redislock/history_append.lua":  true, // appends to the run history, a record beside the slots
	"lock/mutex/mutex_acquire.lua":       true,
	"lock/mutex/mutex_fence.lua":         true,
	"lock/mutex/mutex_release.lua":       true,
	"lock/mutex/mutex_renew.lua":         true,
	"lock/redislock/redlock_align.lua":   true,
	"lock/redislock/redlock_unclaim.lua": true,
	// The operator controls' trigger.lua, arm.lua, pause.lua and occupy.lua
	// are controls.pml's (in scripts.sha256).
	// The same controls on Redlock: the quorum kv under kv.Controls.
	"lock/redislock/redlock_kv_put.lua":  true,
	"lock/redislock/redlock_kv_read.lua": true,
	"lock/redislock/redlock_kv_undo.lua": true,
}

// TestScriptsMirrored fails when a Lua script the model mirrors changed
// since the model was last reviewed against it, or a script is new.
func TestScriptsMirrored(t *testing.T) {
	f, err := os.Open("scripts.sha256")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, path, ok := strings.Cut(strings.TrimSpace(sc.Text()), "  ")
		if !ok {
			t.Fatalf("scripts.sha256: bad line %q", sc.Text())
		}
		listed[path] = true
		b, err := os.ReadFile(filepath.Join("..", path))
		if err != nil {
			t.Errorf("%s: %v: review model/slot.pml and update model/scripts.sha256", path, err)
			continue
		}
		h := sha256.Sum256(b)
		if got := hex.EncodeToString(h[:]); got != sum {
			t.Errorf("%s changed (sha256 %s, scripts.sha256 has %s): review model/slot.pml and update model/scripts.sha256",
				path, got, sum)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, dir := range []string{"../lock/redislock", "../lock/mutex"} {
		lua, err := filepath.Glob(dir + "/*.lua")
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, lua...)
	}
	sort.Strings(all)
	for _, p := range all {
		p = strings.TrimPrefix(filepath.ToSlash(p), "../")
		if !listed[p] && !notMirrored[p] {
			t.Errorf("%s is new: mirror it in model/slot.pml and add it to model/scripts.sha256 (or to notMirrored)", p)
		}
	}
}

// TestModelCheck runs model/check: spin must find the real protocol's
// properties to hold and a counterexample for every mutant. Without spin
// it skips, except under CI=true. It runs the quick check (CI too: the
// model's share of CI's time is bounded) unless SLOTD_MODEL_FULL=1; the
// deeper runs and their state counts are in docs/model.md.
func TestModelCheck(t *testing.T) {
	ci := os.Getenv("CI") == "true"
	for _, tool := range []string{"spin", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			if ci {
				t.Fatalf("%s not on PATH (CI=true): apt-get install %s", tool, tool)
			}
			t.Skipf("%s not on PATH: the model is not checked", tool)
		}
	}
	if testing.Short() && !ci {
		t.Skip("-short: the model check takes a minute or more")
	}
	args := []string{"-quick"}
	if os.Getenv("SLOTD_MODEL_FULL") == "1" {
		args = nil
	}
	// Generous: alone it takes about 2 minutes, but CI runs it beside the
	// other packages on two cores.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "./check", args...)
	out, err := cmd.CombinedOutput()
	t.Logf("model/check %s\n%s", strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("model/check: %v", err)
	}
}
