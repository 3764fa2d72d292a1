package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// `slotd validate` prints no piece of a Redis password from a malformed
// url, url_env or redlock item (net/url quoted `":s3cr"`, or the whole
// password when the URL ended in /), and exits 2.
func TestValidateNeverQuotesRedisPassword(t *testing.T) {
	const password = "Pw9Xk3Vj"
	dir := t.TempDir()
	for _, u := range []string{
		"redis://slotd:" + password + "/",
		"redis://slotd:Pw9X/k3Vj@db:6379/0",
		"redis://:Pw9X#k3Vj@db:6379",
		"redis://slotd:Pw9X?k3Vj@db:6379",
		"redis://slotd:Pw9X%zzk3Vj@db:6379",
		"redis://slotd:" + password + "@db:6379/" + password,
		"redis://slotd:" + password + "@db:6379?dial_timeout=" + password,
		"slotd:" + password + "@db:6379",
	} {
		for key, line := range map[string]string{
			"url":     "url = " + strconv.Quote(u),
			"url_env": `url_env = "SLOTD_TEST_URL"`,
			"redlock": `redlock = ["redis://a:1", ` + strconv.Quote(u) + `, "redis://c:1"]`,
		} {
			t.Setenv("SLOTD_TEST_URL", u)
			path := filepath.Join(dir, key+".toml")
			if err := os.WriteFile(path, []byte("[redis]\n"+line+"\n"+sharedTasks), 0o644); err != nil {
				t.Fatal(err)
			}
			r := runCLI(t, "validate", "-config", path)
			if r.code != exitUsage || !strings.Contains(r.stderr, "invalid Redis URL") {
				t.Errorf("%s = %q: %v; want exit 2 and an invalid Redis URL error", key, u, r)
			}
			for i := 0; i+3 <= len(password); i++ {
				if piece := password[i : i+3]; strings.Contains(r.stdout+r.stderr, piece) {
					t.Errorf("%s = %q: the output quotes %q of the password:\n%v", key, u, piece, r)
					break
				}
			}
		}
	}
}
