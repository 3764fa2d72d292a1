// Package redistest starts real redis-server processes for tests, on a free
// loopback port, without persistence, and stops them by pid when the test
// ends.
//
// When redis-server is not installed the test is skipped — except under CI
// (CI=true), where a missing server is a failure, never a silent skip.
package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slotd/slotd/internal/testport"
)

// Server is one redis-server process.
type Server struct {
	t       testing.TB
	bin     string
	logPath string
	Addr    string // 127.0.0.1:port
	Port    int
	cmd     *exec.Cmd
	args    []string
	tls     *tls.Config // set for a TLS-only server (StartTLS)
}

// Start runs a redis-server for the test and stops it at cleanup.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	port := FreePort(t)
	return startOn(t, port, nil, append([]string{"--port", strconv.Itoa(port)}, extra...)...)
}

// startOn runs redis-server with args, listening on port (plain TCP, or TLS
// when tlsConf is set), and stops it at cleanup.
func startOn(t testing.TB, port int, tlsConf *tls.Config, args ...string) *Server {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	s := &Server{t: t, bin: bin, logPath: dir + "/redis.log", Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), tls: tlsConf}
	s.args = append([]string{
		"--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", dir, "--loglevel", "warning",
	}, args...)
	s.start()
	t.Cleanup(s.Stop)
	return s
}

// Binary is the path of redis-server. Where it is not installed the test is
// skipped, except under CI=true, where that fails it.
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server not found under CI (.ci/run installs it): %v", err)
		}
		t.Skipf("redis-server not installed (apt-get install -y redis-server): %v", err)
	}
	return bin
}

func (s *Server) start() {
	s.t.Helper()
	cmd := exec.Command(s.bin, s.args...)
	// The server's own log goes to a file kept with the test's temp dir.
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start redis-server: %v", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := s.dial()
		if err == nil {
			fmt.Fprint(c, "PING\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			// NOAUTH: up, with the default user off or password-protected.
			if strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH") {
				return
			}
		}
		if time.Now().After(deadline) {
			s.Stop()
			out, _ := os.ReadFile(s.logPath)
			s.t.Fatalf("redistest: redis-server on %s did not answer within 10s; its log:\n%s", s.Addr, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// dial opens a raw connection to the server, through TLS for a TLS server.
func (s *Server) dial() (net.Conn, error) {
	d := &net.Dialer{Timeout: 100 * time.Millisecond}
	if s.tls != nil {
		return tls.DialWithDialer(d, "tcp", s.Addr, s.tls)
	}
	return d.Dial("tcp", s.Addr)
}

// PID is the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Stop kills the server by its pid and waits for it. Safe to call twice.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart stops the server and starts an empty one on the same port.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// Signal sends sig to the server (SIGSTOP/SIGCONT to stall it).
func (s *Server) Signal(sig syscall.Signal) {
	s.t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: signal %v: %v", sig, err)
	}
}

// URL is the redis:// URL of the server (rediss:// for a TLS server).
func (s *Server) URL() string {
	if s.tls != nil {
		return "rediss://" + s.Addr + "/0"
	}
	return "redis://" + s.Addr + "/0"
}

// Client returns a go-redis client for the server, closed at cleanup.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, TLSConfig: s.tls})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// FlushAll empties the server.
func (s *Server) FlushAll() {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, TLSConfig: s.tls})
	defer c.Close()
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		s.t.Fatalf("redistest: flushall: %v", err)
	}
}

// FreePort returns a TCP port free on 127.0.0.1 at the time of the call.
func FreePort(t testing.TB) int {
	t.Helper()
	return testport.Free(t)
}
