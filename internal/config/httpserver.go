package config

import (
	"crypto/tls"
	"strings"
)

// readHTTPServer reads the [http] keys that guard the listener:
// allowed_hosts (the Host values it answers besides loopback names, IP
// literals and the listen address's own host) and tls_cert_file with
// tls_key_file (TLS on the listener, the pair read and checked now).
func (c *Config) readHTTPServer(t table) {
	if v, ok := t.m["allowed_hosts"]; ok {
		list, isList := v.([]any)
		if !isList {
			t.errorf("allowed_hosts", "must be an array of host names, not %s", tomlType(v))
		}
		for i, e := range list {
			name, isString := e.(string)
			if !isString || !validHostPattern(name) {
				t.errorf("allowed_hosts", "item %d (%v) is not a host name (such as \"slotd.example.com\" or \"*.example.com\"; no port, no scheme)", i+1, e)
				continue
			}
			c.AllowedHosts = append(c.AllowedHosts, strings.ToLower(name))
		}
	}
	cert, _ := t.str("tls_cert_file")
	key, _ := t.str("tls_key_file")
	switch {
	case cert == "" && key == "":
	case key == "":
		t.errorf("tls_cert_file", "needs tls_key_file, the certificate's private key")
	case cert == "":
		t.errorf("tls_key_file", "needs tls_cert_file, the certificate it is the key of")
	default:
		if pair, err := keyPair(t, cert, key); err == nil {
			c.HTTPTLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
		}
	}
}

// validHostPattern reports whether s is a DNS name, optionally with a
// leading "*." that matches any one or more labels before the rest.
func validHostPattern(s string) bool {
	s = strings.TrimPrefix(s, "*.")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}
