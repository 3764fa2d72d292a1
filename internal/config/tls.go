package config

import (
	"crypto/tls"
	"crypto/x509"
	"slices"
	"strings"
)

// The [redis] keys of TLS: tls turns it on for addrs (Sentinel, Cluster);
// url turns it on with rediss://. The files apply to whichever.
var redisTLSKeys = []string{"tls", "tls_ca_file", "tls_cert_file", "tls_key_file"}

// readRedisTLS reads the TLS keys after url and addrs, and builds the TLS
// configuration from the files now, so that an unreadable file, a CA file
// without a certificate or a certificate that does not match its key is a
// load error naming the key and the path, not a failure at the first
// connection.
func (c *Config) readRedisTLS(t table) {
	o := &c.Redis
	if v, ok := t.m["tls"]; ok {
		b, isBool := v.(bool)
		switch {
		case !isBool:
			t.errorf("tls", "must be a boolean (true or false), not %s", tomlType(v))
		case b && !t.has("addrs"):
			t.errorf("tls", "only with addrs (Sentinel or Cluster); for one server write the url as rediss://host:port")
		default:
			o.TLS = b
		}
	}
	urlTLS := strings.HasPrefix(c.RedisURL, "rediss://") ||
		slices.ContainsFunc(o.Redlock, func(u string) bool { return strings.HasPrefix(u, "rediss://") })
	ca, _ := t.str("tls_ca_file")
	cert, _ := t.str("tls_cert_file")
	key, _ := t.str("tls_key_file")
	if ca == "" && cert == "" && key == "" {
		return
	}
	if !o.TLS && !urlTLS {
		for _, k := range []string{"tls_ca_file", "tls_cert_file", "tls_key_file"} {
			if t.has(k) {
				t.errorf(k, "needs TLS: a rediss:// url (or redlock URLs), or tls = true with addrs")
			}
		}
		return
	}
	if conf := tlsFiles(t, ca, cert, key); conf != nil {
		o.TLSConfig = conf
	}
}

// tlsFiles builds a TLS configuration from the table's tls_ca_file (ca),
// tls_cert_file (cert) and tls_key_file (key), reading them now; nil after
// reporting the problem, naming the key and the path.
func tlsFiles(t table, ca, cert, key string) *tls.Config {
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	ok := true
	if ca != "" {
		pem, _, err := readFile(ca, MaxNamedFileSize)
		pool := x509.NewCertPool()
		switch {
		case err != nil:
			t.errorf("tls_ca_file", "%v", err)
			ok = false
		case !pool.AppendCertsFromPEM(pem):
			t.errorf("tls_ca_file", "%s holds no PEM certificate", ca)
			ok = false
		default:
			conf.RootCAs = pool
		}
	}
	switch {
	case cert != "" && key == "":
		t.errorf("tls_cert_file", "needs tls_key_file, the certificate's private key")
		ok = false
	case key != "" && cert == "":
		t.errorf("tls_key_file", "needs tls_cert_file, the certificate it is the key of")
		ok = false
	case cert != "":
		pair, err := keyPair(t, cert, key)
		if err != nil {
			ok = false
		} else {
			conf.Certificates = []tls.Certificate{pair}
		}
	}
	if !ok {
		return nil
	}
	return conf
}

// keyPair reads the table's tls_cert_file (cert) and tls_key_file (key)
// with readFile's bounds, reporting a problem under the key it concerns.
// The errors name the files; X509KeyPair never quotes the key.
func keyPair(t table, cert, key string) (tls.Certificate, error) {
	certPEM, _, err := readFile(cert, MaxNamedFileSize)
	if err != nil {
		t.errorf("tls_cert_file", "%v", err)
		return tls.Certificate{}, err
	}
	keyPEM, _, err := readFile(key, MaxNamedFileSize)
	if err != nil {
		t.errorf("tls_key_file", "%v", err)
		return tls.Certificate{}, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.errorf("tls_cert_file", "%s with tls_key_file %s: %v", cert, key, err)
	}
	return pair, err
}
