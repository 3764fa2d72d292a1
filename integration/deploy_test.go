package integration

import (
	"encoding/json"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/assemble"
	dconfig "github.com/slotd/slotd/internal/config"
	"github.com/slotd/slotd/tasks"
)

// The deployment files the deploy tests check, relative to this package.
const (
	deployDir       = "../deploy"
	dockerfilePath  = "../deploy/docker/Dockerfile"
	dockerIgnore    = "../deploy/docker/Dockerfile.dockerignore"
	dockerConfig    = "../deploy/docker/config.toml"
	composePath     = "../deploy/compose/compose.yaml"
	composeProm     = "../deploy/compose/prometheus.yml"
	k8sDir          = "../deploy/kubernetes"
	systemdUnitPath = "../deploy/systemd/slotd.service"
	systemdEnvPath  = "../deploy/systemd/slotd.env"
	readmePath      = "../README.md"
	dashboardPath   = "../deploy/grafana/slotd-dashboard.json"
	alertRulesPath  = "../deploy/prometheus/slotd-alerts.yml"
	alertTestsPath  = "../deploy/prometheus/slotd-alerts.test.yml"

	// configPath is where every deployment puts the configuration.
	configPath = "/etc/slotd/config.toml"
	// httpShutdown bounds the HTTP server's shutdown at the end of `slotd
	// run` (cmd/slotd/cli: run).
	httpShutdown = 5 * time.Second
)

// query is one PromQL expression of a deployment file and where it is.
type query struct {
	where string // "dashboard panel \"Runs by outcome\" target A", "alert SlotdRedisDown"
	expr  string
}

// validateConfig runs `slotd validate` on a configuration file, with env added
// to the environment, and returns its output.
func validateConfig(t *testing.T, path string, env ...string) string {
	t.Helper()
	cmd := exec.Command(slotdBin, "validate", "-config", path)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("slotd validate -config %s: %v\n%s", path, err, out)
	}
	return string(out)
}

// loadDeployConfig loads a deployment's configuration with slotd's own
// loader, env set first.
func loadDeployConfig(t *testing.T, path string, env map[string]string) *dconfig.Config {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	d, err := assemble.Load(path, nil)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return d.Config
}

// stopNeeds is how long `slotd run` may take to stop after SIGTERM with
// cfg: shutdown_grace for running tasks, then an exec task's SIGTERM to
// SIGKILL grace (the default, or the longest configured), then the HTTP
// server's shutdown. A container runtime or service manager that kills it
// sooner cuts the hand-over of running slots short.
func stopNeeds(t *testing.T, cfg *dconfig.Config) time.Duration {
	t.Helper()
	grace := tasks.DefaultExecGrace
	for _, task := range cfg.Tasks {
		if s, ok := task.Params["grace"].(string); ok && task.Plugin == "exec" {
			if d, err := time.ParseDuration(s); err == nil && d > grace {
				grace = d
			}
		}
	}
	return cfg.ShutdownGrace + grace + httpShutdown
}

// listenPort is the port of an [http] listen address, which must be on
// every interface (a container's or pod's port).
func listenPort(t *testing.T, cfg *dconfig.Config) string {
	t.Helper()
	host, port, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		t.Fatalf("%s: [http] listen %q: %v", cfg.Source, cfg.Listen, err)
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		t.Errorf("%s: [http] listen %q: a container must listen on every interface (\":%s\"), not %s", cfg.Source, cfg.Listen, port, host)
	}
	return port
}

// defaultPort is the port of the daemon's default [http] listen address.
func defaultPort(t *testing.T) string {
	t.Helper()
	_, port, err := net.SplitHostPort(dconfig.DefaultListen)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// healthcheckDefaultURL asks the binary which URL `slotd healthcheck`
// asks when given no -url.
func healthcheckDefaultURL(t *testing.T) string {
	t.Helper()
	out, _ := exec.Command(slotdBin, "healthcheck", "-h").CombinedOutput()
	m := regexp.MustCompile(`-url string[^(]*\(default "([^"]+)"\)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("slotd healthcheck -h does not show the default -url:\n%s", out)
	}
	return string(m[1])
}

// checkHealthcheck checks that a healthcheck command — slotd healthcheck,
// with or without -url — asks /healthz on port.
func checkHealthcheck(t *testing.T, where string, argv []string, binary, port string) {
	t.Helper()
	if len(argv) < 2 || argv[0] != binary || argv[1] != "healthcheck" {
		t.Errorf("%s: healthcheck %q, want [%s healthcheck ...]", where, argv, binary)
		return
	}
	url := healthcheckDefaultURL(t)
	if i := slices.Index(argv, "-url"); i >= 0 && i+1 < len(argv) {
		url = argv[i+1]
	}
	if want := "http://127.0.0.1:" + port + "/healthz"; url != want {
		t.Errorf("%s: healthcheck asks %s, want %s", where, url, want)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Every YAML and JSON file under deploy/ parses, and every TOML file is a
// configuration `slotd validate` accepts.
func TestDeployFilesParse(t *testing.T) {
	t.Parallel()
	env := []string{"SLOTD_REDIS_URL=redis://127.0.0.1:6379/0"}
	var yamls, jsons, tomls int
	err := filepath.WalkDir(deployDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		switch filepath.Ext(path) {
		case ".yml", ".yaml":
			yamls++
			if len(loadYAML(t, path)) == 0 {
				t.Errorf("%s: no YAML document", path)
			}
		case ".json":
			jsons++
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			var v any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Errorf("%s: %v", path, err)
			}
		case ".toml":
			tomls++
			out := validateConfig(t, path, env...)
			if !strings.Contains(out, "config ok") {
				t.Errorf("%s: slotd validate says:\n%s", path, out)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d YAML, %d JSON, %d TOML files", yamls, jsons, tomls)
	if yamls < 12 || jsons < 1 || tomls < 3 {
		t.Errorf("found %d YAML, %d JSON, %d TOML files under %s: the walk missed some", yamls, jsons, tomls, deployDir)
	}
}
