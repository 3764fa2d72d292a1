package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotd/slotd/internal/redistest"
)

// k8sObjects reads every manifest of the kustomize base, by kind.
func k8sObjects(t *testing.T) map[string]ydoc {
	t.Helper()
	objs := map[string]ydoc{}
	files, _ := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		for _, d := range loadYAML(t, f) {
			kind := d.str("kind")
			if _, dup := objs[kind]; dup {
				t.Errorf("%s: a second %s", f, kind)
			}
			objs[kind] = d
		}
	}
	return objs
}

// The kustomization lists every manifest present and generates the
// ConfigMap from config.toml, the file the Deployment mounts.
func TestKustomization(t *testing.T) {
	t.Parallel()
	k := loadYAMLDoc(t, filepath.Join(k8sDir, "kustomization.yaml"))
	resources := k.strs("resources")
	files, _ := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	var present []string
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" {
			present = append(present, b)
		}
	}
	slices.Sort(present)
	sorted := slices.Sorted(slices.Values(resources))
	if !slices.Equal(sorted, present) {
		t.Errorf("kustomization.yaml resources %q, want every manifest present: %q", resources, present)
	}
	gen := k.at("configMapGenerator", 0)
	if gen.str("name") != "slotd-config" || !slices.Equal(gen.strs("files"), []string{"config.toml"}) {
		t.Errorf("kustomization.yaml: configMapGenerator %v, want slotd-config from config.toml", gen.v)
	}
	if _, err := os.Stat(filepath.Join(k8sDir, "config.toml")); err != nil {
		t.Error(err)
	}

	// kubectl's own kustomize, when installed: the base builds, and holds
	// the objects listed plus the generated ConfigMap with config.toml.
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Log("kubectl not installed: the base was not built with kustomize")
		return
	}
	out, err := exec.Command(kubectl, "kustomize", k8sDir).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", k8sDir, err)
	}
	docs, err := parseYAML(string(out))
	if err != nil {
		t.Fatalf("kustomize output: %v\n%s", err, out)
	}
	var kinds []string
	var configMap, deploymentVolume string
	for _, v := range docs {
		d := ydoc{t, "kustomize output", v}
		kind := d.str("kind")
		kinds = append(kinds, kind)
		switch kind {
		case "ConfigMap":
			configMap = d.str("metadata", "name")
			if got := d.str("data", "config.toml"); got != string(mustRead(t, filepath.Join(k8sDir, "config.toml"))) {
				t.Errorf("the generated ConfigMap's config.toml differs from config.toml:\n%s", got)
			}
		case "Deployment":
			deploymentVolume = d.str("spec", "template", "spec", "volumes", 0, "configMap", "name")
		}
	}
	slices.Sort(kinds)
	if want := []string{"ConfigMap", "Deployment", "NetworkPolicy", "PodDisruptionBudget", "PrometheusRule", "Secret", "Service", "ServiceMonitor"}; !slices.Equal(kinds, want) {
		t.Errorf("kustomize builds %q, want %q", kinds, want)
	}
	if !strings.HasPrefix(configMap, "slotd-config-") || deploymentVolume != configMap {
		t.Errorf("the Deployment mounts ConfigMap %q, kustomize generated %q: want the hashed name in both", deploymentVolume, configMap)
	}
}

// The manifests fit the daemon and each other: the container runs the
// configuration from the ConfigMap at the path the image uses, its Redis
// URL comes from the Secret through url_env, the probes ask /healthz and
// /readyz on the listen port, the grace outlasts a stop, the pods run as
// non-root with a read-only root, and the PDB, Service and ServiceMonitor
// select these pods and this port.
func TestKubernetesManifests(t *testing.T) {
	objs := k8sObjects(t)
	for _, kind := range []string{"Deployment", "PodDisruptionBudget", "Service", "ServiceMonitor", "PrometheusRule", "Secret", "NetworkPolicy"} {
		if _, ok := objs[kind]; !ok {
			t.Errorf("no %s in %s", kind, k8sDir)
		}
	}
	dep := objs["Deployment"]
	secret := objs["Secret"]
	url := secret.str("stringData", "url")

	pod := dep.at("spec", "template", "spec")
	c := pod.at("containers", 0)
	env := map[string]string{}
	for i := range c.list("env") {
		e := c.at("env", i)
		ref := e.at("valueFrom", "secretKeyRef")
		if ref.v == nil {
			continue
		}
		if ref.str("name") != secret.str("metadata", "name") {
			t.Errorf("deployment.yaml: env %s from Secret %q, the Secret is %q", e.str("name"), ref.str("name"), secret.str("metadata", "name"))
		}
		v, ok := secret.get("stringData", ref.str("key"))
		if !ok {
			t.Errorf("deployment.yaml: env %s: the Secret has no key %q", e.str("name"), ref.str("key"))
		}
		s, _ := v.(string)
		env[e.str("name")] = s
	}

	cfgPath := filepath.Join(k8sDir, "config.toml")
	if !strings.Contains(string(mustRead(t, cfgPath)), "\nurl_env = ") {
		t.Errorf("%s: want [redis] url_env: the Redis URL (password included) belongs in the Secret", cfgPath)
	}
	cfg := loadDeployConfig(t, cfgPath, env)
	if cfg.RedisURL != url || url == "" {
		t.Errorf("%s: Redis URL %q, want the Secret's %q through url_env", cfgPath, cfg.RedisURL, url)
	}
	out := validateConfig(t, cfgPath, "SLOTD_REDIS_URL="+url)
	if !strings.Contains(out, "config ok") || !strings.Contains(out, "redis") {
		t.Errorf("slotd validate on the ConfigMap's config.toml:\n%s", out)
	}
	port := listenPort(t, cfg)
	if port != defaultPort(t) {
		t.Errorf("%s: port %s, want the daemon's default %s", cfgPath, port, defaultPort(t))
	}

	if n := dep.str("spec", "replicas"); n != "3" {
		t.Errorf("deployment.yaml: replicas %s, want 3", n)
	}
	labels := dep.at("spec", "template", "metadata", "labels").v.(map[string]any)
	selects := func(where string, sel any) {
		t.Helper()
		m, ok := sel.(map[string]any)
		if !ok || len(m) == 0 {
			t.Errorf("%s: no matchLabels", where)
			return
		}
		for k, v := range m {
			if labels[k] != v {
				t.Errorf("%s: selects %s=%v, the pods have %v", where, k, v, labels[k])
			}
		}
	}
	selects("deployment.yaml selector", dep.at("spec", "selector", "matchLabels").v)
	aff := pod.at("affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution", 0, "podAffinityTerm")
	if aff.str("topologyKey") != "kubernetes.io/hostname" {
		t.Errorf("deployment.yaml: podAntiAffinity topologyKey %v, want kubernetes.io/hostname", aff.at("topologyKey").v)
	}
	selects("deployment.yaml podAntiAffinity", aff.at("labelSelector", "matchLabels").v)

	// Command, configuration path, ports, probes.
	if args := c.strs("args"); !slices.Equal(args, []string{"run", "-config", configPath}) {
		t.Errorf("deployment.yaml: args %q, want run -config %s", args, configPath)
	}
	var mounted string
	for i := range c.list("volumeMounts") {
		vm := c.at("volumeMounts", i)
		if vm.str("mountPath") == filepath.Dir(configPath) {
			mounted = vm.str("name")
		}
	}
	var fromConfigMap bool
	for i := range pod.list("volumes") {
		v := pod.at("volumes", i)
		if v.str("name") == mounted && v.at("configMap").v != nil {
			fromConfigMap = v.str("configMap", "name") == "slotd-config"
		}
	}
	if !fromConfigMap {
		t.Errorf("deployment.yaml: %s is not the slotd-config ConfigMap (volume %q)", filepath.Dir(configPath), mounted)
	}
	portName := c.str("ports", 0, "name")
	if cp := c.str("ports", 0, "containerPort"); cp != port {
		t.Errorf("deployment.yaml: containerPort %s, the config listens on %s", cp, port)
	}
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
		p := c.at(probe, "httpGet")
		if p.str("path") != path || (p.str("port") != portName && p.str("port") != port) {
			t.Errorf("deployment.yaml: %s %v, want %s on port %s (%s)", probe, p.v, path, port, portName)
		}
	}

	// Stopping, resources, security.
	if g, err := strconv.Atoi(pod.str("terminationGracePeriodSeconds")); err != nil || time.Duration(g)*time.Second <= stopNeeds(t, cfg) {
		t.Errorf("deployment.yaml: terminationGracePeriodSeconds %v, want more than %v (shutdown_grace %v + exec kill grace + HTTP shutdown)", pod.at("terminationGracePeriodSeconds").v, stopNeeds(t, cfg), cfg.ShutdownGrace)
	}
	for _, r := range []string{"cpu", "memory"} {
		if _, ok := c.get("resources", "requests", r); !ok {
			t.Errorf("deployment.yaml: no %s request", r)
		}
	}
	if pod.str("securityContext", "runAsNonRoot") != "true" || pod.str("securityContext", "runAsUser") == "0" {
		t.Errorf("deployment.yaml: pod securityContext %v, want runAsNonRoot and a non-root user", pod.at("securityContext").v)
	}
	sc := c.at("securityContext")
	if sc.str("readOnlyRootFilesystem") != "true" || sc.str("allowPrivilegeEscalation") != "false" || !slices.Equal(sc.strs("capabilities", "drop"), []string{"ALL"}) {
		t.Errorf("deployment.yaml: container securityContext %v, want readOnlyRootFilesystem, no privilege escalation, drop ALL", sc.v)
	}

	// PDB, Service, ServiceMonitor.
	selects("pdb.yaml", objs["PodDisruptionBudget"].at("spec", "selector", "matchLabels").v)
	svc := objs["Service"]
	selects("service.yaml", svc.at("spec", "selector").v)
	sp := svc.at("spec", "ports", 0)
	if sp.str("port") != port || (sp.str("targetPort") != portName && sp.str("targetPort") != port) {
		t.Errorf("service.yaml: port %v, want %s to the container's %s", sp.v, port, portName)
	}
	sm := objs["ServiceMonitor"]
	for k, v := range sm.at("spec", "selector", "matchLabels").v.(map[string]any) {
		if svc.at("metadata", "labels").v.(map[string]any)[k] != v {
			t.Errorf("servicemonitor.yaml: selects %s=%v, the Service has %v", k, v, svc.at("metadata", "labels").v)
		}
	}
	ep := sm.at("spec", "endpoints", 0)
	if ep.str("port") != sp.str("name") || ep.str("path") != "/metrics" {
		t.Errorf("servicemonitor.yaml: endpoint %v, want port %q path /metrics", ep.v, sp.str("name"))
	}

	// Issue 26 item 14: the NetworkPolicy selects these pods and lets in,
	// on the HTTP port only, the slotd pods and one namespace (Prometheus).
	np := objs["NetworkPolicy"]
	selects("networkpolicy.yaml", np.at("spec", "podSelector", "matchLabels").v)
	if types := np.strs("spec", "policyTypes"); !slices.Contains(types, "Ingress") {
		t.Errorf("networkpolicy.yaml: policyTypes %q, want Ingress", types)
	}
	rules := np.list("spec", "ingress")
	if len(rules) != 1 {
		t.Fatalf("networkpolicy.yaml: %d ingress rules, want 1", len(rules))
	}
	rule := np.at("spec", "ingress", 0)
	if ports := rule.list("ports"); len(ports) != 1 || (rule.str("ports", 0, "port") != portName && rule.str("ports", 0, "port") != port) || rule.str("ports", 0, "protocol") != "TCP" {
		t.Errorf("networkpolicy.yaml: ports %v, want the container's %s (%s) only", rule.at("ports").v, port, portName)
	}
	var fromPods, fromNamespace bool
	for i := range rule.list("from") {
		f := rule.at("from", i)
		switch {
		case f.at("podSelector").v != nil && f.at("namespaceSelector").v == nil:
			selects("networkpolicy.yaml from podSelector", f.at("podSelector", "matchLabels").v)
			fromPods = true
		case f.at("namespaceSelector").v != nil && f.at("podSelector").v == nil:
			fromNamespace = f.str("namespaceSelector", "matchLabels", "kubernetes.io/metadata.name") != ""
		default:
			t.Errorf("networkpolicy.yaml: from %v: want a podSelector or a namespaceSelector by name", f.v)
		}
		if f.at("ipBlock").v != nil {
			t.Errorf("networkpolicy.yaml: from %v: an ipBlock lets in more than the fleet and Prometheus", f.v)
		}
	}
	if !fromPods || !fromNamespace {
		t.Errorf("networkpolicy.yaml: from %v: want the slotd pods and the Prometheus namespace", rule.at("from").v)
	}
	// The example task calls the fleet through the Service's name: the
	// Host check must let that name in.
	if !slices.Contains(cfg.AllowedHosts, svc.str("metadata", "name")) {
		t.Errorf("%s: [http] allowed_hosts %q lacks the Service's name %q", cfgPath, cfg.AllowedHosts, svc.str("metadata", "name"))
	}
}

// The PrometheusRule holds exactly the rules of slotd-alerts.yml (which has
// the unit tests), and promtool accepts them.
func TestKubernetesPrometheusRule(t *testing.T) {
	t.Parallel()
	rule := k8sObjects(t)["PrometheusRule"]
	alerts := loadYAMLDoc(t, alertRulesPath)
	if !reflect.DeepEqual(rule.at("spec", "groups").v, alerts.at("groups").v) {
		t.Errorf("prometheusrule.yaml spec.groups differs from %s: copy it again (sed -n '/^groups:/,$p' | indent by 2)", alertRulesPath)
	}
	// The alert tests' typed reading of the rules agrees with this one.
	parsed, err := parseAlertRules(string(mustRead(t, alertRulesPath)))
	if err != nil {
		t.Fatal(err)
	}
	rules := rule.list("spec", "groups", 0, "rules")
	if len(rules) != len(parsed) {
		t.Fatalf("prometheusrule.yaml: %d rules, slotd-alerts.yml %d", len(rules), len(parsed))
	}
	for i, p := range parsed {
		r := rule.at("spec", "groups", 0, "rules", i)
		if r.str("alert") != p.name || strings.TrimRight(r.str("expr"), "\n") != p.expr {
			t.Errorf("rule %d: %s %q, parseAlertRules reads %s %q", i, r.str("alert"), r.str("expr"), p.name, p.expr)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool not found under CI: %v", err)
		}
		t.Skip("promtool not installed")
	}
	// JSON is YAML: promtool reads the extracted spec as a rule file.
	b, err := json.Marshal(rule.at("spec").v)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "prometheusrule-spec.yml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", f).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on prometheusrule.yaml's spec: %v\n%s", err, out)
	}
}

// The Kubernetes configuration runs: a real slotd on it (only the listen
// address moved to a free loopback port), with the Redis URL from the
// environment as the Secret provides it, answers the Deployment's probe
// paths, the ServiceMonitor's /metrics, and `slotd healthcheck`.
func TestKubernetesConfigServesProbes(t *testing.T) {
	srv := redistest.Start(t)
	objs := k8sObjects(t)
	c := objs["Deployment"].at("spec", "template", "spec", "containers", 0)
	cfg := string(mustRead(t, filepath.Join(k8sDir, "config.toml")))
	const listen = "\nlisten = \":9464\"\n"
	if !strings.Contains(cfg, listen) {
		t.Fatalf("config.toml: no %q line to move to a free port", strings.TrimSpace(listen))
	}
	cfg = strings.Replace(cfg, listen, "\nlisten = \"127.0.0.1:0\"\n", 1)
	t.Setenv("SLOTD_REDIS_URL", "redis://"+srv.Addr+"/0")
	r := startReplica(t, "k8s", cfg)
	addr := r.httpAddr(15 * time.Second)
	paths := []string{c.str("livenessProbe", "httpGet", "path"), c.str("readinessProbe", "httpGet", "path"),
		objs["ServiceMonitor"].str("spec", "endpoints", 0, "path")}
	for _, path := range paths {
		awaitPoll(t, "200 from "+path, 15*time.Second, func() int {
			code, _, _ := httpGet(addr, path)
			return code
		}, func(code int) bool { return code == 200 }, func(code int) string { return strconv.Itoa(code) })
	}
	if out, err := exec.Command(slotdBin, "healthcheck", "-url", "http://"+addr+"/healthz").CombinedOutput(); err != nil {
		t.Errorf("slotd healthcheck against the daemon: %v\n%s", err, out)
	}
	t.Logf("probes %q answered 200", paths)
}
