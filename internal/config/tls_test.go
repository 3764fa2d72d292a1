package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/slotd/slotd/internal/redistest"
)

// The TLS keys are read and their files loaded at load: a good set gives a
// TLS configuration with the CA and the client certificate, and each
// mistake is an error naming the key and the file.
func TestRedisTLSConfig(t *testing.T) {
	x := redistest.NewTLS(t)
	q := func(s string) string { return `"` + s + `"` }
	all := "tls_ca_file = " + q(x.CAFile) + "\ntls_cert_file = " + q(x.ClientCert) + "\ntls_key_file = " + q(x.ClientKey)

	for _, tc := range []struct {
		name, redis string
		ca, cert    bool
	}{
		{"rediss url with CA and client certificate", "url = \"rediss://db:6380\"\n" + all, true, true},
		{"rediss url with CA only", "url = \"rediss://db:6380\"\ntls_ca_file = " + q(x.CAFile), true, false},
		{"cluster over TLS", "addrs = [\"n1:6379\"]\ncluster = true\ntls = true\n" + all, true, true},
		{"sentinel over TLS, system roots", "addrs = [\"s1:26379\"]\nmaster_name = \"m\"\ntls = true", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte("[redis]\n"+tc.redis+"\n"+minimal), "test.toml", nil, testPlugins)
			if err != nil {
				t.Fatal(err)
			}
			tc2 := cfg.Redis.TLSConfig
			if !tc.ca && !tc.cert {
				if tc2 != nil {
					t.Fatalf("TLSConfig = %+v with no files; want nil (system roots)", tc2)
				}
				return
			}
			if tc2 == nil {
				t.Fatal("no TLS configuration read")
			}
			if (tc2.RootCAs != nil) != tc.ca || (len(tc2.Certificates) == 1) != tc.cert {
				t.Fatalf("TLSConfig has CA %v, %d certificates; want CA %v, certificate %v", tc2.RootCAs != nil, len(tc2.Certificates), tc.ca, tc.cert)
			}
		})
	}

	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.crt")
	for _, tc := range []struct {
		name, redis string
		want        []string
	}{
		{"tls with url", "url = \"redis://db:6379\"\ntls = true", []string{"redis.tls", "only with addrs", "rediss://"}},
		{"tls not a bool", "addrs = [\"n1:6379\"]\ncluster = true\ntls = \"yes\"", []string{"redis.tls", "must be a boolean"}},
		{"CA file with plain url", "url = \"redis://db:6379\"\ntls_ca_file = " + q(x.CAFile), []string{"redis.tls_ca_file", "needs TLS", "rediss://"}},
		{"CA file with addrs, tls off", "addrs = [\"n1:6379\"]\ncluster = true\ntls_ca_file = " + q(x.CAFile), []string{"redis.tls_ca_file", "needs TLS"}},
		{"missing CA file", "url = \"rediss://db:6380\"\ntls_ca_file = " + q(missing), []string{"redis.tls_ca_file", missing, "no such file"}},
		{"CA file without a certificate", "url = \"rediss://db:6380\"\ntls_ca_file = " + q(notPEM), []string{"redis.tls_ca_file", notPEM, "no PEM certificate"}},
		{"certificate without key", "url = \"rediss://db:6380\"\ntls_cert_file = " + q(x.ClientCert), []string{"redis.tls_cert_file", "needs tls_key_file"}},
		{"key without certificate", "url = \"rediss://db:6380\"\ntls_key_file = " + q(x.ClientKey), []string{"redis.tls_key_file", "needs tls_cert_file"}},
		{"key of another certificate", "url = \"rediss://db:6380\"\ntls_cert_file = " + q(x.ClientCert) + "\ntls_key_file = " + q(x.ServerKey),
			[]string{"redis.tls_cert_file", x.ServerKey, "private key does not match"}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantRedisError(t, tc.redis, tc.want) })
	}
}
