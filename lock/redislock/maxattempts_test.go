package redislock

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
	"github.com/slotd/slotd/lock"
)

// claim.lua cannot import a Go constant, so it spells the cap out; this
// test ties every number in it that names the cap to MaxAttempts.
func TestClaimLuaCapIsMaxAttempts(t *testing.T) {
	caps := regexp.MustCompile(`n >= (\d+)`).FindAllStringSubmatch(claimLua, -1)
	if len(caps) == 0 {
		t.Fatal("claim.lua: no `n >= <cap>` test found")
	}
	for _, m := range caps {
		if m[1] != strconv.Itoa(lock.MaxAttempts) {
			t.Errorf("claim.lua caps attempts at %s, lock.MaxAttempts is %d", m[1], lock.MaxAttempts)
		}
	}
	if m := regexp.MustCompile(`stop at (\d+)`).FindStringSubmatch(claimLua); m == nil || m[1] != strconv.Itoa(lock.MaxAttempts) {
		t.Errorf("claim.lua's header does not say attempts stop at %d: %v", lock.MaxAttempts, m)
	}
}

// The script's cap, whatever its text, is MaxAttempts: a slot whose counter
// is one below it is won once more (as attempt MaxAttempts), then exhausted,
// even when the policy would allow more.
func TestClaimStopsAtMaxAttempts(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	r := New(rdb, "slotd")
	defer r.Close()
	ctx := context.Background()
	now := time.Now()
	slot := lock.Slot{Task: "cap", ID: "1", Time: now.Add(-time.Second), Deadline: now.Add(time.Hour)}
	_, attempts := Keys("slotd", slot)
	if err := rdb.Set(ctx, attempts, lock.MaxAttempts-1, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	p := lock.Policy{Lease: time.Minute, DoneTTL: time.Hour, MaxAttempts: 10 * lock.MaxAttempts}
	c, err := r.Claim(ctx, slot, "a", p)
	if err != nil || c.Result != lock.Won || c.Attempt != lock.MaxAttempts {
		t.Fatalf("claim at %d attempts = %+v, %v; want won as attempt %d", lock.MaxAttempts-1, c, err, lock.MaxAttempts)
	}
	if err := r.Release(ctx, slot, lock.Owner{ID: "a", Attempt: c.Attempt}); err != nil {
		t.Fatal(err)
	}
	if c, err = r.Claim(ctx, slot, "a", p); err != nil || c.Result != lock.Exhausted || c.Attempt != lock.MaxAttempts {
		t.Fatalf("claim at %d attempts = %+v, %v; want exhausted", lock.MaxAttempts, c, err)
	}
}
