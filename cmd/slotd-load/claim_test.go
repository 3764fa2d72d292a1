package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// noteClaim parses claim.lua's calls by their layout; a change of the
// script's arguments per slot must change claimArgs with it, or the load
// tool sees no claims (as it did when ARGV[a+8] was added).
func TestClaimArgsMatchClaimScript(t *testing.T) {
	src, err := os.ReadFile("../../lock/redislock/claim.lua")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("3 keys and %d\n-- arguments each", claimArgs)
	if !strings.Contains(string(src), want) {
		t.Fatalf("claim.lua's header does not say %q: update claimArgs and noteClaim", want)
	}
	if !strings.Contains(string(src), fmt.Sprintf("ARGV[a+%d]", claimArgs)) ||
		strings.Contains(string(src), fmt.Sprintf("ARGV[a+%d]", claimArgs+1)) {
		t.Fatalf("claim.lua's last argument per slot is not ARGV[a+%d]", claimArgs)
	}
}
