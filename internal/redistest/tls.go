package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TLS is a throwaway certificate authority with a server certificate for
// 127.0.0.1 and localhost and a client certificate, as PEM files in a
// temporary directory, for redis-servers that speak only TLS.
type TLS struct {
	Dir                   string
	CAFile                string // the CA's certificate: what clients trust
	ServerCert, ServerKey string
	ClientCert, ClientKey string
	Config                *tls.Config // trusts the CA and presents the client certificate
	caCert                *x509.Certificate
	caKey                 *ecdsa.PrivateKey
}

// NewTLS writes a fresh CA and its server and client certificates, valid
// for an hour.
func NewTLS(t testing.TB) *TLS {
	t.Helper()
	dir := t.TempDir()
	x := &TLS{Dir: dir}
	x.caKey = newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &x.caKey.PublicKey, x.caKey)
	if err != nil {
		t.Fatalf("redistest: CA certificate: %v", err)
	}
	if x.caCert, err = x509.ParseCertificate(der); err != nil {
		t.Fatalf("redistest: CA certificate: %v", err)
	}
	x.CAFile = filepath.Join(dir, "ca.crt")
	writePEM(t, x.CAFile, "CERTIFICATE", der)
	// Servers present theirs as clients too: to each other on the cluster
	// bus and to their master when replicating.
	x.ServerCert, x.ServerKey = x.issue(t, "server", 2, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	x.ClientCert, x.ClientKey = x.issue(t, "client", 3, x509.ExtKeyUsageClientAuth)
	pool := x509.NewCertPool()
	pool.AddCert(x.caCert)
	pair, err := tls.LoadX509KeyPair(x.ClientCert, x.ClientKey)
	if err != nil {
		t.Fatalf("redistest: client key pair: %v", err)
	}
	x.Config = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	return x
}

// issue writes a certificate signed by the CA for 127.0.0.1 and localhost,
// and its key, and returns their paths.
func (x *TLS) issue(t testing.TB, name string, serial int64, usage ...x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "redistest " + name},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, x.caCert, &key.PublicKey, x.caKey)
	if err != nil {
		t.Fatalf("redistest: %s certificate: %v", name, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatalf("redistest: %s key: %v", name, err)
	}
	certFile, keyFile = filepath.Join(x.Dir, name+".crt"), filepath.Join(x.Dir, name+".key")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("redistest: key: %v", err)
	}
	return k
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// StartTLS runs a redis-server that accepts only TLS connections, with the
// server certificate of x, requiring clients to present a certificate the
// CA signed (extra "--tls-auth-clients", "no" lifts that). Addr is its TLS
// port; URL is rediss://; Client trusts the CA and presents the client
// certificate.
func StartTLS(t testing.TB, x *TLS, extra ...string) *Server {
	t.Helper()
	port := FreePort(t)
	args := []string{
		"--port", "0", "--tls-port", strconv.Itoa(port),
		"--tls-cert-file", x.ServerCert, "--tls-key-file", x.ServerKey,
		"--tls-ca-cert-file", x.CAFile, "--tls-auth-clients", "yes",
	}
	return startOn(t, port, x.Config, append(args, extra...)...)
}
