package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 26 item 14: a token_file anyone in its group (or anyone at all)
// could write, and a token holding bytes no client can send in an
// Authorization header (a UTF-8 letter, a control character), were taken.
// Both are refused, naming the key and never quoting the token; a file
// as a Kubernetes secret mounts it (0644, behind a symlink) is taken.
func TestTokenFileRefusedWhenWritableOrUnsendable(t *testing.T) {
	dir := t.TempDir()
	const secret = "s3cret-token-0123456789"
	for _, tc := range []struct {
		name    string
		content string
		mode    os.FileMode
		want    string // "" = accepted
	}{
		{"0600", secret + "\n", 0o600, ""},
		{"0644, a secret volume's default", secret, 0o644, ""},
		{"group-writable", secret, 0o664, "writable by its group or by anyone (mode -rw-rw-r--)"},
		{"world-writable", secret, 0o606, "writable by its group or by anyone"},
		{"a UTF-8 letter", "s3cret-tökèn-0123456789", 0o600, "holds byte 0xc3 at offset 8: want visible ASCII only"},
		{"a NUL", "s3cret-token\x00-0123456789", 0o600, "holds byte 0x00 at offset 12"},
		{"DEL", "s3cret-token\x7f-0123456789", 0o600, "holds byte 0x7f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			if err := os.WriteFile(file, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(file, tc.mode); err != nil {
				t.Fatal(err)
			}
			link := file + ".link"
			if err := os.Symlink(file, link); err != nil {
				t.Fatal(err)
			}
			cfg, err := Parse([]byte("[http]\ntoken_file = \""+link+"\"\n"+minimal), "test.toml", nil, testPlugins)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == "" && cfg.Token != strings.TrimSpace(tc.content):
				t.Fatal("the token read is not the file's")
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), "http.token_file: ") || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v; want http.token_file refused: %q", err, tc.want)
			case err != nil && strings.Contains(err.Error(), "0123456789"):
				t.Fatalf("the error quotes the token: %v", err)
			}
		})
	}
	t.Setenv("SLOTD_TEST_TOKEN_UTF8", "s3cret-tökèn-0123456789")
	if _, err := Parse([]byte("[http]\ntoken_env = \"SLOTD_TEST_TOKEN_UTF8\"\n"+minimal), "test.toml", nil, testPlugins); err == nil ||
		!strings.Contains(err.Error(), "http.token_env: ") || !strings.Contains(err.Error(), "visible ASCII") {
		t.Errorf("token_env with a UTF-8 letter: %v", err)
	}
}
