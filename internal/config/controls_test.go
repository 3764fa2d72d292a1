package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestControlKeys(t *testing.T) {
	cfg := parse(t, `
[defaults]
concurrency = "forbid"
[[task]]
name = "a"
schedule = "@hourly"
plugin = "config-test-noop"
paused = true
[[task]]
name = "b"
schedule = "@hourly"
plugin = "config-test-noop"
concurrency = "replace"
[[task]]
name = "c"
schedule = "@hourly"
plugin = "config-test-noop"
concurrency = "allow"
[[task]]
name = "d"
schedule = "@hourly"
plugin = "config-test-noop"
concurrency = "queue"
`)
	want := []struct {
		paused      bool
		concurrency Concurrency
	}{{true, ConcurrencyForbid}, {false, ConcurrencyReplace}, {false, ConcurrencyAllow}, {false, ConcurrencyQueue}}
	for i, w := range want {
		if got := cfg.Tasks[i]; got.Paused != w.paused || got.Concurrency != w.concurrency {
			t.Errorf("task %s: paused %v concurrency %q, want %v %q", got.Name, got.Paused, got.Concurrency, w.paused, w.concurrency)
		}
	}
	if d := parse(t, minimal); d.Tasks[0].Concurrency != ConcurrencyAllow || d.Tasks[0].Paused || d.Token != "" {
		t.Errorf("defaults: %+v, token set %v", d.Tasks[0], d.Token != "")
	}
}

func TestTokenSources(t *testing.T) {
	secret := "s3cret-token-0123456789"
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg := parse(t, "[http]\ntoken_file = \""+file+"\"\n"+minimal); cfg.Token != secret || cfg.TokenFile != file {
		t.Errorf("token_file: token read %v, file %q", cfg.Token == secret, cfg.TokenFile)
	}
	t.Setenv("SLOTD_TEST_TOKEN", secret)
	if cfg := parse(t, "[http]\ntoken_env = \"SLOTD_TEST_TOKEN\"\n"+minimal); cfg.Token != secret || cfg.TokenEnv != "SLOTD_TEST_TOKEN" {
		t.Errorf("token_env: token read %v, env %q", cfg.Token == secret, cfg.TokenEnv)
	}
	t.Setenv("SLOTD_TEST_SHORT", "short")
	for _, tc := range []struct{ name, src, want string }{
		{"both", "[http]\ntoken_file = \"" + file + "\"\ntoken_env = \"SLOTD_TEST_TOKEN\"\n", "set either token_file or token_env"},
		{"missing file", "[http]\ntoken_file = \"/nonexistent/token\"\n", "http.token_file"},
		{"unset env", "[http]\ntoken_env = \"SLOTD_TEST_UNSET_TOKEN\"\n", "at least 16"},
		{"short", "[http]\ntoken_env = \"SLOTD_TEST_SHORT\"\n", "is 5 bytes"},
		{"bad env name", "[http]\ntoken_env = \"A-B\"\n", "not an environment variable name"},
		{"concurrency", "[defaults]\nconcurrency = \"Forbid\"\n", `"Forbid": want "allow", "forbid", "replace" or "queue"`},
		{"concurrency in a task", strings.Replace(minimal, "[[task]]", "[[task]]\nconcurrency = \"buffer\"", 1), `concurrency: "buffer": want "allow", "forbid", "replace" or "queue"`},
		{"paused string", strings.Replace(minimal, "[[task]]", "[[task]]\npaused = \"yes\"", 1), "paused: must be true or false"},
		{"paused in defaults", "[defaults]\npaused = true\n", `unknown key "defaults.paused"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.src
			if !strings.Contains(src, "[[task]]") {
				src += minimal
			}
			_, err := Parse([]byte(src), "test.toml", nil, testPlugins)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "short\"") {
				t.Fatalf("error quotes the token: %v", err)
			}
		})
	}
}
