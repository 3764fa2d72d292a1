package integration

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dconfig "github.com/slotd/slotd/internal/config"
	"github.com/slotd/slotd/scheduler"
)

// parseUnit reads a systemd unit file: section -> key -> values (a key may
// repeat).
func parseUnit(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || l[0] == '#' || l[0] == ';':
		case l[0] == '[' && l[len(l)-1] == ']':
			section = l[1 : len(l)-1]
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: %q", path, n, l)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

// The systemd unit: the hardening the issue asks for, a stop timeout
// longer than a stop needs with the default shutdown_grace, SIGTERM to
// slotd alone (it signals its tasks), the configuration path, the
// environment file with a valid Redis URL for url_env; and, where
// systemd-analyze is installed, systemd's own verification and its
// exposure score.
func TestSystemdUnit(t *testing.T) {
	u := parseUnit(t, systemdUnitPath)
	s := u["Service"]
	one := func(k string) string {
		if len(s[k]) != 1 {
			t.Errorf("slotd.service: %s=%q, want one value", k, s[k])
			return ""
		}
		return s[k][0]
	}
	for k, want := range map[string]string{
		"DynamicUser": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "NoNewPrivileges": "yes",
		"PrivateTmp": "yes", "CapabilityBoundingSet": "", "Restart": "on-failure", "KillSignal": "SIGTERM",
		"KillMode": "mixed", "SystemCallFilter": "@system-service",
	} {
		if got := one(k); got != want {
			t.Errorf("slotd.service: %s=%q, want %q", k, got, want)
		}
	}
	if !strings.Contains(one("RestrictAddressFamilies"), "AF_INET") {
		t.Errorf("slotd.service: RestrictAddressFamilies=%q", one("RestrictAddressFamilies"))
	}
	exe := strings.Fields(one("ExecStart"))
	if len(exe) != 4 || exe[1] != "run" || exe[2] != "-config" || exe[3] != configPath {
		t.Errorf("slotd.service: ExecStart=%q, want <slotd> run -config %s", one("ExecStart"), configPath)
	}
	stop, err := time.ParseDuration(one("TimeoutStopSec"))
	if err != nil {
		t.Errorf("slotd.service: TimeoutStopSec: %v", err)
	}
	def := &dconfig.Config{ShutdownGrace: scheduler.DefaultShutdownGrace}
	if needs := stopNeeds(t, def); stop <= needs {
		t.Errorf("slotd.service: TimeoutStopSec=%v, want more than %v (the default shutdown_grace %v + exec kill grace + HTTP shutdown)", stop, needs, def.ShutdownGrace)
	}
	if ef := one("EnvironmentFile"); strings.TrimPrefix(ef, "-") != filepath.Join(filepath.Dir(configPath), filepath.Base(systemdEnvPath)) {
		t.Errorf("slotd.service: EnvironmentFile=%q, want %s beside the config", ef, filepath.Join(filepath.Dir(configPath), filepath.Base(systemdEnvPath)))
	}

	// The environment file gives url_env a valid URL: the Kubernetes
	// configuration (url_env = "SLOTD_REDIS_URL") validates with it.
	env := map[string]string{}
	for l := range strings.Lines(string(mustRead(t, systemdEnvPath))) {
		if l = strings.TrimSpace(l); l != "" && l[0] != '#' {
			k, v, _ := strings.Cut(l, "=")
			env[k] = v
		}
	}
	if env["SLOTD_REDIS_URL"] == "" {
		t.Errorf("slotd.env: no SLOTD_REDIS_URL")
	}
	loadDeployConfig(t, filepath.Join(k8sDir, "config.toml"), env)

	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze not installed: the unit was not verified by systemd")
		return
	}
	unit := strings.Replace(string(mustRead(t, systemdUnitPath)), "ExecStart="+exe[0], "ExecStart="+slotdBin, 1)
	f := filepath.Join(t.TempDir(), "slotd.service")
	if err := os.WriteFile(f, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	// verify exits 0 on unknown keys and bad values; it prints them.
	out, err := exec.Command(sa, "verify", f).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify slotd.service: %v\n%s", err, out)
	}
	out, _ = exec.Command(sa, "security", "--offline=yes", f).CombinedOutput()
	if m := regexp.MustCompile(`Overall exposure level for slotd.service: ([0-9.]+)`).FindSubmatch(out); m != nil {
		score, _ := strconv.ParseFloat(string(m[1]), 64)
		t.Logf("systemd-analyze security: exposure %.1f (0 = fully sandboxed, 10 = not at all)", score)
		if score > 2.5 {
			t.Errorf("systemd-analyze security: exposure %.1f, want at most 2.5", score)
		}
	} else {
		t.Logf("systemd-analyze security --offline gave no score:\n%s", out)
	}
}
