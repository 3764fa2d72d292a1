package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// go-redis's own messages (pool, reconnects, Sentinel, a duration it
// rounds) reach the daemon's log as slog records, scoped to the replica
// and component=redis, not as unformatted lines in a JSON log.
func TestRunRoutesRedisLogThroughSlog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "slotd.toml")
	src := `[daemon]
replica = "r-redislog"

[http]
listen = "off"

[log]
format = "json"
`
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- Main(ctx, []string{"run", "-config", path}, &stdout, &stderr) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stderr.String(), "slotd starting") {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the daemon did not start:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A duration below go-redis's resolution makes it log, before it
	// dials (which fails: nothing listens on port 1).
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	_ = rdb.PExpire(ctx, "k", 500*time.Microsecond).Err()
	rdb.Close()
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("run exited %d:\n%s", code, stderr.String())
	}
	var found map[string]any
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if msg, _ := m["msg"].(string); strings.Contains(msg, "truncating to 1ms") {
			found = m
		}
	}
	if found == nil || found["component"] != "redis" || found["replica"] != "r-redislog" || found["level"] != "WARN" {
		t.Errorf("go-redis's message = %v; want a WARN record with component=redis and the replica\n%s", found, stderr.String())
	}
}
