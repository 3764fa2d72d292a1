package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 26 item 7: status, history and validate exited 2 when the write
// endpoints' token (token_file, token_env) could not be read, so reading
// the fleet needed the write secret. They no longer read it: status and
// history work, validate checks the rest and warns. A token that is
// readable but bad is still an error for validate, and the commands that
// send it (trigger, reload) still need it.
func TestReadOnlyCommandsNeedNoToken(t *testing.T) {
	s := newShared(t)
	s.done(s.latest("report"), "r1")
	src, err := os.ReadFile(s.path)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, http string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(strings.Replace(string(src), "[http]\n", "[http]\n"+http, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	t.Setenv("SLOTD_CLI_TEST_UNSET", "")
	os.Unsetenv("SLOTD_CLI_TEST_UNSET")
	for _, tc := range []struct{ name, http string }{
		{"token_file missing", `token_file = "` + filepath.Join(dir, "no-such-token") + "\"\n"},
		{"token_env unset", "token_env = \"SLOTD_CLI_TEST_UNSET\"\n"},
	} {
		path := write(strings.ReplaceAll(tc.name, " ", "-")+".toml", tc.http)
		if r := runCLI(t, "status", "-config", path); r.code != exitOK || !strings.Contains(r.stdout, "report") {
			t.Errorf("%s: status: %v", tc.name, r)
		}
		if r := runCLI(t, "history", "-config", path, "report"); r.code != exitOK || !strings.Contains(r.stdout, "r1") {
			t.Errorf("%s: history: %v", tc.name, r)
		}
		if r := runCLI(t, "validate", "-config", path); r.code != exitOK || !strings.Contains(r.stdout, "config ok") ||
			!strings.Contains(r.stderr, "warning") || !strings.Contains(r.stderr, "not checked") {
			t.Errorf("%s: validate: %v; want exit 0 with a warning", tc.name, r)
		}
		if r := runCLI(t, "reload", "-config", path); r.code != exitUsage {
			t.Errorf("%s: reload, which sends the token: %v; want exit 2", tc.name, r)
		}
	}

	short := filepath.Join(dir, "short-token")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := write("short.toml", `token_file = "`+short+"\"\n")
	if r := runCLI(t, "validate", "-config", path); r.code != exitUsage || !strings.Contains(r.stderr, "http.token_file") || !strings.Contains(r.stderr, "at least 16") {
		t.Errorf("validate of a readable, too short token: %v; want exit 2 naming the key", r)
	}
}
