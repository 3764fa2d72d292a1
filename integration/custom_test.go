package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The custom-binary example of the README builds, knows its own plugin next
// to the built-in ones, runs it and rejects a bad parameter of it at load.
func TestCustomBinaryRunsItsPlugin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := built(t, "./cmd/slotd-custom")
	cfg := filepath.Join(dir, "custom.toml")
	write := func(params string) {
		t.Helper()
		conf := `[http]
listen = "off"
[log]
format = "json"
[defaults]
catchup = "none"
[[task]]
name = "hello"
schedule = "@every 1s"
plugin = "greet"
  [task.params]
` + params
		if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	write(`  greting = "typo"` + "\n")
	out, err := exec.Command(bin, "validate", "-config", cfg).CombinedOutput()
	if code := exitCode(err); code != 2 || !strings.Contains(string(out), "greting") {
		t.Fatalf("bad greet param: exit %d, output %s; want 2 naming greting", code, out)
	}

	write(`  greeting = "hello from a plugin"` + "\n")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", "-config", cfg)
	logPath := filepath.Join(dir, "stderr.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stderr = logf
	readLog := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The plugin's own log line carries the slot it ran.
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(readLog(), `"msg":"hello from a plugin"`) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("greet never ran within 15s; log:\n%s", readLog())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("custom binary did not exit cleanly on SIGINT: %v\n%s", err, readLog())
	}
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}
