package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The compose stack: persistent Redis; three slotd replicas with distinct
// hostnames (so distinct replica ids), the stack's configuration at the
// path the image runs, a stop grace longer than a stop needs, a healthcheck
// on the listen port; Prometheus scraping exactly those replicas with the
// alert rules; Grafana with the dashboard and a Prometheus data source;
// every file mounted exists.
func TestCompose(t *testing.T) {
	t.Parallel()
	d := loadYAMLDoc(t, composePath)
	dir := filepath.Dir(composePath)
	svcs, _ := d.get("services")
	services, ok := svcs.(map[string]any)
	if !ok {
		t.Fatalf("compose.yaml: no services")
	}

	// Every bind mount's source exists; remember where each file goes.
	mounts := map[string]map[string]string{} // service -> target -> source (relative to the repository)
	for name := range services {
		mounts[name] = map[string]string{}
		for _, v := range d.at("services", name).strs("volumes") {
			parts := strings.Split(v, ":")
			if len(parts) < 2 {
				t.Errorf("compose.yaml: %s: volume %q", name, v)
				continue
			}
			src := parts[0]
			if !strings.HasPrefix(src, ".") {
				if _, ok := d.get("volumes", src); !ok {
					t.Errorf("compose.yaml: %s: named volume %q is not declared under volumes", name, src)
				}
				continue
			}
			if _, err := os.Stat(filepath.Join(dir, src)); err != nil {
				t.Errorf("compose.yaml: %s: %v", name, err)
			}
			rel, _ := filepath.Rel("..", filepath.Join(dir, src))
			mounts[name][parts[1]] = filepath.ToSlash(rel)
		}
	}

	// Redis keeps its data.
	redisCmd := d.at("services", "redis").strs("command")
	if i := slices.Index(redisCmd, "--appendonly"); i < 0 || i+1 >= len(redisCmd) || redisCmd[i+1] != "yes" {
		t.Errorf("compose.yaml: redis command %q: want --appendonly yes (done markers must survive a restart)", redisCmd)
	}
	if !slices.Contains(d.at("services", "redis").strs("volumes"), "redis-data:/data") {
		t.Errorf("compose.yaml: redis: no volume for /data")
	}

	// The slotd replicas.
	var replicas []string
	for name := range services {
		if strings.HasPrefix(name, "slotd-") {
			replicas = append(replicas, name)
		}
	}
	slices.Sort(replicas)
	if len(replicas) != 3 {
		t.Fatalf("compose.yaml: slotd services %v, want 3", replicas)
	}
	hostnames := map[string]string{}
	var cfgFile string
	for _, name := range replicas {
		s := d.at("services", name)
		if s.str("build", "dockerfile") != "deploy/docker/Dockerfile" || s.str("build", "context") != "../.." {
			t.Errorf("compose.yaml: %s: build %v, want the repository root and deploy/docker/Dockerfile", name, s.at("build").v)
		}
		h := s.str("hostname")
		if prev, dup := hostnames[h]; dup || h == "" {
			t.Errorf("compose.yaml: %s: hostname %q (also %s): each replica needs its own, its replica id is <hostname>-<pid>", name, h, prev)
		}
		hostnames[h] = name
		if cmd := s.strs("command"); !slices.Equal(cmd, []string{"run", "-config", configPath}) {
			t.Errorf("compose.yaml: %s: command %q, want run -config %s", name, cmd, configPath)
		}
		src := mounts[name][configPath]
		if src == "" {
			t.Errorf("compose.yaml: %s: nothing mounted at %s", name, configPath)
		} else if cfgFile != "" && src != cfgFile {
			t.Errorf("compose.yaml: %s mounts %s, another replica %s", name, src, cfgFile)
		}
		cfgFile = src
		if sig, ok := s.get("stop_signal"); ok && sig != "SIGTERM" {
			t.Errorf("compose.yaml: %s: stop_signal %v", name, sig)
		}
	}
	cfg := loadDeployConfig(t, filepath.Join("..", cfgFile), nil)
	if m := regexp.MustCompile(`(?m)^replica\s*=\s*"(.+)"`).FindSubmatch(mustRead(t, filepath.Join("..", cfgFile))); m != nil {
		t.Errorf("%s: replica %q: the three replicas share this file, so it must leave replica empty (<hostname>-<pid>)", cfgFile, m[1])
	}
	if !strings.HasPrefix(cfg.RedisURL, "redis://redis:") {
		t.Errorf("%s: Redis %q, want the redis service", cfgFile, cfg.RedisURL)
	}
	port := listenPort(t, cfg)
	needs := stopNeeds(t, cfg)
	for _, name := range replicas {
		s := d.at("services", name)
		if g := s.duration("stop_grace_period"); g <= needs {
			t.Errorf("compose.yaml: %s: stop_grace_period %v, want more than %v (shutdown_grace %v + exec kill grace + HTTP shutdown)", name, g, needs, cfg.ShutdownGrace)
		}
		test := s.strs("healthcheck", "test")
		if len(test) > 0 && test[0] == "CMD" {
			test = test[1:]
		}
		checkHealthcheck(t, "compose.yaml "+name, test, "/usr/local/bin/slotd", port)
		ports := s.strs("ports")
		if len(ports) != 1 || !strings.HasSuffix(ports[0], ":"+port) {
			t.Errorf("compose.yaml: %s: ports %q, want one mapping to the listen port %s", name, ports, port)
		}
	}

	// Prometheus scrapes the three replicas on the listen port, with the rules.
	prom := loadYAMLDoc(t, composeProm)
	var targets []string
	for i := range prom.list("scrape_configs") {
		sc := prom.at("scrape_configs", i)
		if p, ok := sc.get("metrics_path"); ok && p != "/metrics" {
			t.Errorf("prometheus.yml: metrics_path %v", p)
		}
		for j := range sc.list("static_configs") {
			targets = append(targets, sc.strs("static_configs", j, "targets")...)
		}
	}
	var want []string
	for _, name := range replicas {
		want = append(want, name+":"+port)
	}
	if slices.Sort(targets); !slices.Equal(targets, want) {
		t.Errorf("prometheus.yml: targets %q, want %q", targets, want)
	}
	// Prometheus sends each target's name as the Host: the daemon's
	// Host check (against DNS rebinding) must let each in.
	for _, name := range replicas {
		if !slices.Contains(cfg.AllowedHosts, name) {
			t.Errorf("%s: [http] allowed_hosts %q lacks %q, which Prometheus scrapes", cfgFile, cfg.AllowedHosts, name)
		}
	}
	promMounts := mounts["prometheus"]
	for _, rf := range prom.strs("rule_files") {
		if promMounts[rf] != strings.TrimPrefix(alertRulesPath, "../") {
			t.Errorf("prometheus.yml: rule file %s is %q in the container, want %s", rf, promMounts[rf], alertRulesPath)
		}
	}
	if cf := promMounts["/etc/prometheus/prometheus.yml"]; cf != "deploy/compose/prometheus.yml" {
		t.Errorf("compose.yaml: prometheus: /etc/prometheus/prometheus.yml is %q", cf)
	}

	// Grafana: the provisioning files, the dashboard where the provider looks.
	gm := mounts["grafana"]
	var dsFile, provFile string
	for target, src := range gm {
		switch {
		case strings.HasPrefix(target, "/etc/grafana/provisioning/datasources/"):
			dsFile = src
		case strings.HasPrefix(target, "/etc/grafana/provisioning/dashboards/"):
			provFile = src
		}
	}
	if dsFile == "" || provFile == "" {
		t.Fatalf("compose.yaml: grafana: datasource provisioning %q, dashboard provisioning %q: want both", dsFile, provFile)
	}
	ds := loadYAMLDoc(t, filepath.Join("..", dsFile))
	if ds.str("datasources", 0, "type") != "prometheus" || ds.str("datasources", 0, "url") != "http://prometheus:9090" {
		t.Errorf("%s: %v, want a prometheus data source at http://prometheus:9090", dsFile, ds.at("datasources", 0).v)
	}
	prov := loadYAMLDoc(t, filepath.Join("..", provFile))
	dashDir := prov.str("providers", 0, "options", "path")
	found := false
	for target, src := range gm {
		if filepath.Dir(target) == dashDir && src == strings.TrimPrefix(dashboardPath, "../") {
			found = true
		}
	}
	if !found {
		t.Errorf("compose.yaml: grafana: %s is not mounted in %s, where %s looks", dashboardPath, dashDir, provFile)
	}

	// Prometheus' own check of its configuration, with the rule file where
	// compose mounts it.
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool not found under CI: %v", err)
		}
		t.Log("promtool not installed: prometheus.yml not checked by Prometheus")
		return
	}
	b := mustRead(t, composeProm)
	rules, _ := filepath.Abs(alertRulesPath)
	tmp := filepath.Join(t.TempDir(), "prometheus.yml")
	if err := os.WriteFile(tmp, []byte(strings.ReplaceAll(string(b), "/etc/prometheus/rules/slotd-alerts.yml", rules)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "config", tmp).CombinedOutput(); err != nil {
		t.Errorf("promtool check config prometheus.yml: %v\n%s", err, out)
	}
}
