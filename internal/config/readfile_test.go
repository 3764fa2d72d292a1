//go:build unix

package config

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
)

// Issue 26 item 3: tls_ca_file = "/dev/zero" then a reload took a daemon's
// memory until it was killed, and a FIFO as token_file (or as the file
// itself) blocked the load for ever. Every file the configuration names,
// and the configuration, is refused unless it is a regular file of at most
// its limit; each error names the key and the file, and comes at once.
func TestNamedFilesBounded(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.pem")
	if err := os.WriteFile(big, make([]byte, MaxNamedFileSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	x := redistest.NewTLS(t)
	q := func(s string) string { return `"` + s + `"` }
	for _, bad := range []struct{ path, why string }{
		{"/dev/zero", "not a regular file"},
		{fifo, "not a regular file"},
		{dir, "not a regular file"},
		{big, "larger than 1048576 bytes (1 MiB)"},
	} {
		for _, tc := range []struct{ key, src string }{
			{"redis.tls_ca_file", "[redis]\nurl = \"rediss://db:6380\"\ntls_ca_file = " + q(bad.path)},
			{"redis.tls_cert_file", "[redis]\nurl = \"rediss://db:6380\"\ntls_cert_file = " + q(bad.path) + "\ntls_key_file = " + q(x.ClientKey)},
			{"redis.tls_key_file", "[redis]\nurl = \"rediss://db:6380\"\ntls_cert_file = " + q(x.ClientCert) + "\ntls_key_file = " + q(bad.path)},
			{"etcd.tls_ca_file", "[etcd]\nendpoints = [\"https://e1:2379\"]\ntls_ca_file = " + q(bad.path)},
			{"http.token_file", "[http]\ntoken_file = " + q(bad.path)},
		} {
			start := time.Now()
			_, err := Parse([]byte(tc.src+"\n"+minimal), "test.toml", nil, testPlugins)
			if d := time.Since(start); d > 4*time.Second {
				t.Errorf("%s = %s: took %v", tc.key, bad.path, d)
			}
			if err == nil || !strings.Contains(err.Error(), tc.key+": ") || !strings.Contains(err.Error(), bad.path) || !strings.Contains(err.Error(), bad.why) {
				t.Errorf("%s = %s: %v; want an error naming the key, the file and %q", tc.key, bad.path, err, bad.why)
			}
		}
		if bad.path == big {
			continue // a big configuration file is TestLoadBoundsFileSize's
		}
		start := time.Now()
		if _, err := Load(bad.path, nil, testPlugins); err == nil || !strings.Contains(err.Error(), bad.why) {
			t.Errorf("Load(%s) = %v; want %q", bad.path, err, bad.why)
		}
		if d := time.Since(start); d > 4*time.Second {
			t.Errorf("Load(%s) took %v", bad.path, d)
		}
	}

	// A symlink to a regular file (a Kubernetes secret's ..data link) is
	// read.
	link := filepath.Join(dir, "ca.crt")
	if err := os.Symlink(x.CAFile, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse([]byte("[redis]\nurl = \"rediss://db:6380\"\ntls_ca_file = "+q(link)+"\n"+minimal), "test.toml", nil, testPlugins); err != nil {
		t.Errorf("a CA file behind a symlink: %v", err)
	}
}

// Issue 26 item 4: a file written while it is read (a reload during
// `cat > slotd.toml`) is refused, not taken half-written.
func TestLoadRefusesFileChangedWhileRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "slotd.toml")
	if err := os.WriteFile(path, []byte(minimal), 0o644); err != nil {
		t.Fatal(err)
	}
	afterRead = func(p string) {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		if _, err := f.WriteString("\n[[task]]\nname = \"half"); err != nil {
			t.Error(err)
		}
	}
	_, err := Load(path, nil, testPlugins)
	afterRead = nil
	if err == nil || !strings.Contains(err.Error(), "changed while it was read") || !strings.Contains(err.Error(), path) {
		t.Errorf("Load = %v; want the file refused as changed while read", err)
	}
}
