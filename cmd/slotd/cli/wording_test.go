package cli

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/observe"
	"github.com/slotd/slotd/internal/redistest"
)

// Issue 26 item 16: status said "(Redis clock)" whatever the store, and
// a command on Redlock with a master down printed go-redis's raw lines
// ("redis: 2026/... pool.go:770: ...") before its own error, which
// already names each node.
func TestStatusWording(t *testing.T) {
	for _, tc := range []struct{ store, want string }{
		{"[redis]\nurl = \"redis://127.0.0.1:6379\"\n", "(Redis clock)"},
		{"[etcd]\nendpoints = [\"http://127.0.0.1:2379\"]\n", "(etcd clock)"},
		{"[zookeeper]\nservers = [\"127.0.0.1:2181\"]\n", "(ZooKeeper clock)"},
	} {
		path := filepath.Join(t.TempDir(), "slotd.toml")
		if err := os.WriteFile(path, []byte(tc.store+sharedTasks), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, ok := loadReadOnly(path, discard, os.Stderr)
		if !ok {
			t.Fatal("load")
		}
		var b strings.Builder
		if err := writeStatus(&b, observe.StatusReport{Now: time.Now()}, clockName(cfg.Config)); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("%s: status header %q, want %q", strings.TrimSpace(tc.store), b.String(), tc.want)
		}
	}

	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "slotd.toml")
	src := fmt.Sprintf("[redis]\nredlock = [%q, \"redis://127.0.0.1:1\", \"redis://127.0.0.1:2\"]\n[http]\nlisten = \"off\"\n%s", srv.URL(), sharedTasks)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	// go-redis writes its lines to the process's stderr, not the
	// command's: record what reaches its logger instead.
	var raw syncBuffer
	redis.SetLogger(redisLogger{newLogger(&raw, slog.LevelDebug, "json")})
	defer quietRedis()
	r := runCLI(t, "status", "-config", path)
	if r.code != exitError || !strings.Contains(r.stderr, "127.0.0.1:1") {
		t.Fatalf("status with 2 of 3 masters down: %v; want exit 1 naming the nodes", r)
	}
	if raw.String() != "" {
		t.Errorf("go-redis's own messages reached its logger (printed raw by a command):\n%s", raw.String())
	}
}
