package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
)

// startDaemon runs `slotd run` on the file src in-process until the test
// ends, and waits until it serves HTTP.
func startDaemon(t *testing.T, src string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "slotd.toml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- Main(ctx, []string{"run", "-config", path}, &stdout, &stderr) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("run exited %d:\n%s", code, stderr.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stderr.String(), "http listening") {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not start:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return path
}

// get asks url with Host host and returns the status code, or -1 and the
// error if no answer came.
func get(t *testing.T, client *http.Client, url, host string) (int, string, error) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := client.Do(req)
	if err != nil {
		return -1, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), nil
}

// Issue 26 item 14, on a running daemon: its API answered any Host (DNS
// rebinding lets any web page read a loopback daemon), and spoke only
// plain HTTP, the bearer token in clear text. Now a Host that is not an
// IP, localhost, the listen host or in allowed_hosts is 421; with
// tls_cert_file/tls_key_file the listener speaks TLS only, and the
// commands that call it (reload here) trust exactly its certificate.
func TestDaemonHostCheckAndTLS(t *testing.T) {
	x := redistest.NewTLS(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(cliToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	task := `
[[task]]
name = "a"
schedule = "@every 1h"
plugin = "cli-test-counted"
catchup = "none"
`
	for _, withTLS := range []bool{false, true} {
		port := redistest.FreePort(t)
		section := fmt.Sprintf("[http]\nlisten = \"127.0.0.1:%d\"\ntoken_file = %q\nallowed_hosts = [\"slotd.example.com\"]\n", port, tokenFile)
		scheme, client := "http", httpClient()
		if withTLS {
			section += fmt.Sprintf("tls_cert_file = %q\ntls_key_file = %q\n", x.ServerCert, x.ServerKey)
			scheme = "https"
			client = httpsClient(x.CAFile)
		}
		path := startDaemon(t, "[daemon]\nreplica = \"r-http\"\n[log]\nformat = \"json\"\n"+section+task)
		base := fmt.Sprintf("%s://127.0.0.1:%d", scheme, port)
		for _, tc := range []struct {
			host string
			want int
		}{
			{fmt.Sprintf("127.0.0.1:%d", port), 200},
			{fmt.Sprintf("localhost:%d", port), 200},
			{"slotd.example.com", 200},
			{fmt.Sprintf("rebound.attacker.example:%d", port), http.StatusMisdirectedRequest},
		} {
			code, body, err := get(t, client, base+"/api/v1/tasks", tc.host)
			if code != tc.want {
				t.Errorf("TLS %v, Host %s: %d %q %v; want %d", withTLS, tc.host, code, body, err, tc.want)
			}
		}
		if r := runCLI(t, "reload", "-config", path); r.code != exitOK {
			t.Errorf("TLS %v: slotd reload: %v", withTLS, r)
		}
		if withTLS {
			if code, _, err := get(t, httpClient(), fmt.Sprintf("http://127.0.0.1:%d/api/v1/tasks", port), ""); err == nil && code == 200 {
				t.Errorf("plain HTTP answered 200 on the TLS listener")
			}
		}
	}
}

func httpClient() *http.Client { return &http.Client{Timeout: 10 * time.Second} }

// httpsClient trusts the CA in caFile.
func httpsClient(caFile string) *http.Client {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		panic(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}}}
}
