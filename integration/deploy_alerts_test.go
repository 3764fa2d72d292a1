package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// ---- the Prometheus alert rules ----

// alertRule is one rule of the alert file.
type alertRule struct {
	name        string
	line        int
	expr        string
	forDur      string
	labels      map[string]string
	annotations map[string]string
}

// parseAlertRules reads Prometheus rule files written in the YAML subset
// slotd-alerts.yml keeps to (there is no YAML library in go.mod: the one in
// the module graph, go.yaml.in/yaml, is required by prometheus/common and
// client_golang for packages slotd does not import, so it is in neither
// go.mod nor go.sum, and using it would add a dependency): block mappings and
// "- " lists indented with spaces; values plain, "double-quoted" or
// 'single-quoted' on one line, or a `|`/`|-` block scalar; comments only on
// lines of their own. Anything else — tabs, flow collections, anchors,
// folded scalars, multi-line plain scalars — is reported as an error rather
// than misread.
func parseAlertRules(text string) ([]alertRule, error) {
	type frame struct {
		indent int
		key    string
	}
	var (
		rules []alertRule
		cur   *alertRule
		stack []frame // the open mapping keys, outermost first
	)
	lines := strings.Split(text, "\n")
	for n := 0; n < len(lines); n++ {
		raw := strings.TrimRight(lines[n], " \r")
		lineNo := n + 1
		if strings.Contains(raw, "\t") {
			return nil, fmt.Errorf("line %d: tab", lineNo)
		}
		trimmed := strings.TrimLeft(raw, " ")
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		indent := len(raw) - len(trimmed)
		item := false
		if strings.HasPrefix(trimmed, "- ") {
			item = true
			trimmed = strings.TrimLeft(trimmed[2:], " ")
			indent = len(raw) - len(trimmed)
		}
		key, val, ok := strings.Cut(trimmed, ":")
		if !ok || !regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`).MatchString(key) || val != "" && val[0] != ' ' {
			return nil, fmt.Errorf("line %d: want `key: value`, got %q", lineNo, trimmed)
		}
		val = strings.TrimSpace(val)
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		parent := ""
		if len(stack) > 0 {
			parent = stack[len(stack)-1].key
		}
		if val == "|" || val == "|-" {
			// A block scalar: the following lines indented deeper.
			var block []string
			blockIndent := -1
			for n+1 < len(lines) {
				next := strings.TrimRight(lines[n+1], " \r")
				nt := strings.TrimLeft(next, " ")
				ni := len(next) - len(nt)
				if nt != "" && ni <= indent {
					break
				}
				n++
				if nt == "" {
					block = append(block, "")
					continue
				}
				if strings.Contains(next, "\t") {
					return nil, fmt.Errorf("line %d: tab", n+1)
				}
				if blockIndent < 0 {
					blockIndent = ni
				}
				if ni < blockIndent {
					return nil, fmt.Errorf("line %d: block scalar dedented", n+1)
				}
				block = append(block, next[blockIndent:])
			}
			val = strings.TrimRight(strings.Join(block, "\n"), "\n")
		} else if val != "" {
			switch val[0] {
			case '"':
				s, err := strconv.Unquote(val)
				if err != nil {
					return nil, fmt.Errorf("line %d: double-quoted value: %v", lineNo, err)
				}
				val = s
			case '\'':
				if len(val) < 2 || val[len(val)-1] != '\'' {
					return nil, fmt.Errorf("line %d: unterminated single-quoted value", lineNo)
				}
				val = strings.ReplaceAll(val[1:len(val)-1], "''", "'")
			case '{', '[', '&', '*', '!', '>', '|', '%', '@', '`':
				return nil, fmt.Errorf("line %d: unsupported YAML %q", lineNo, val)
			default:
				if strings.Contains(val, " #") {
					return nil, fmt.Errorf("line %d: comments only on lines of their own", lineNo)
				}
			}
		}
		switch {
		case key == "alert" && item && parent == "rules":
			rules = append(rules, alertRule{name: val, line: lineNo, labels: map[string]string{}, annotations: map[string]string{}})
			cur = &rules[len(rules)-1]
		case key == "record" && item && parent == "rules":
			// A recording rule: read, then dropped (not an alert).
			cur = &alertRule{name: val, line: lineNo, labels: map[string]string{}, annotations: map[string]string{}}
		case cur != nil && parent == "labels":
			cur.labels[key] = val
		case cur != nil && parent == "annotations":
			cur.annotations[key] = val
		case cur != nil && key == "expr":
			cur.expr = val
		case cur != nil && key == "for":
			cur.forDur = val
		case cur != nil && (key == "labels" || key == "annotations" || key == "keep_firing_for"):
		case key == "groups" && indent == 0, key == "name" && parent == "groups", key == "rules" && parent == "groups",
			key == "interval" && parent == "groups", key == "limit" && parent == "groups":
			if key == "name" || key == "rules" {
				cur = nil
			}
		default:
			return nil, fmt.Errorf("line %d: unexpected key %q (under %q)", lineNo, key, parent)
		}
		if val == "" {
			stack = append(stack, frame{indent, key})
		}
	}
	return rules, nil
}

func loadAlertRules(t *testing.T) ([]alertRule, []query) {
	t.Helper()
	b, err := os.ReadFile(alertRulesPath)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := parseAlertRules(string(b))
	if err != nil {
		t.Fatalf("%s: %v", alertRulesPath, err)
	}
	var qs []query
	for _, r := range rules {
		qs = append(qs, query{fmt.Sprintf("alert %s (%s:%d)", r.name, filepath.Base(alertRulesPath), r.line), r.expr})
	}
	return rules, qs
}

func TestParseAlertRules(t *testing.T) {
	t.Parallel()
	rules, err := parseAlertRules(`# c
groups:
  - name: g
    rules:
      - alert: A
        expr: |
          sum by (task) (x)
            > 0

        for: 5m
        labels:
          severity: critical
        annotations:
          summary: "say \"{{ $labels.task }}\""
          description: 'it''s'
      - record: r
        expr: y
      - alert: B
        expr: z == 0
`)
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 2 {
		t.Fatalf("%d rules, want 2: %+v", len(rules), rules)
	}
	a, b := rules[0], rules[1]
	if a.name != "A" || a.expr != "sum by (task) (x)\n  > 0" || a.forDur != "5m" || a.labels["severity"] != "critical" ||
		a.annotations["summary"] != `say "{{ $labels.task }}"` || a.annotations["description"] != "it's" {
		t.Errorf("rule A: %+v", a)
	}
	if b.name != "B" || b.expr != "z == 0" || b.forDur != "" || len(b.labels) != 0 {
		t.Errorf("rule B: %+v", b)
	}
	for _, bad := range []string{"groups:\n\t- name: g\n", "groups: {a: 1}\n", "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: x # c\n", "colour: red\n"} {
		if _, err := parseAlertRules(bad); err == nil {
			t.Errorf("no error for %q", bad)
		}
	}
}

// The alert rules: the ones the issue asks for, each with a severity, a
// summary and a description, a well-formed `for`, an expression that
// parses, and annotations that use only labels the expression keeps.
func TestAlertRulesStructure(t *testing.T) {
	t.Parallel()
	rules, qs := loadAlertRules(t)
	byName := map[string]alertRule{}
	for _, r := range rules {
		if _, dup := byName[r.name]; dup {
			t.Errorf("alert %s defined twice", r.name)
		}
		byName[r.name] = r
		if !slices.Contains([]string{"critical", "warning", "info"}, r.labels["severity"]) {
			t.Errorf("alert %s: severity %q, want critical, warning or info", r.name, r.labels["severity"])
		}
		for _, a := range []string{"summary", "description"} {
			if strings.TrimSpace(r.annotations[a]) == "" {
				t.Errorf("alert %s: no %s annotation", r.name, a)
			}
		}
		if r.forDur != "" && !regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`).MatchString(r.forDur) {
			t.Errorf("alert %s: for %q is not a Prometheus duration", r.name, r.forDur)
		}
		n, err := parsePromQL(r.expr)
		if err != nil {
			t.Errorf("alert %s: %v", r.name, err)
			continue
		}
		// With aggregations, only the labels every by clause keeps survive.
		var kept []string
		for i, list := range n.byLists {
			if i == 0 {
				kept = slices.Clone(list)
			} else {
				kept = slices.DeleteFunc(kept, func(l string) bool { return !slices.Contains(list, l) })
			}
		}
		for a, text := range r.annotations {
			for _, m := range regexp.MustCompile(`\$labels\.([A-Za-z_][A-Za-z0-9_]*)`).FindAllStringSubmatch(text, -1) {
				if len(n.byLists) > 0 && !slices.Contains(kept, m[1]) {
					t.Errorf("alert %s: annotation %s uses $labels.%s, which the expression aggregates away (kept: %v)", r.name, a, m[1], kept)
				}
			}
		}
	}
	want := map[string]string{
		"SlotdTaskNoRecentSuccess": "slotd_last_success_timestamp_seconds",
		"SlotdSlotsExhausted":      "slotd_slots_exhausted_total",
		"SlotdLeaseLost":           "slotd_lease_losses_total",
		"SlotdRedisDown":           "slotd_redis_up",
		"SlotdClockSkew":           "slotd_clock_skew_seconds",
		"SlotdSlotsMissed":         "slotd_slots_missed_total",
	}
	for name, metric := range want {
		r, ok := byName[name]
		if !ok {
			t.Errorf("no alert %s", name)
			continue
		}
		if !strings.Contains(r.expr, metric) {
			t.Errorf("alert %s: expr does not use %s:\n%s", name, metric, r.expr)
		}
	}
	if r := byName["SlotdRedisDown"]; r.forDur != "1m" {
		t.Errorf("alert SlotdRedisDown: for %q, want 1m", r.forDur)
	}
	checkMissedIsMax(t, qs)
}

// promtool, when installed (Debian package prometheus), checks the alert
// rules with Prometheus's own parser, runs their unit tests
// (slotd-alerts.test.yml), and parses the dashboard's expressions too, as
// recording rules with Grafana's variables filled in. .ci/run installs it;
// elsewhere the test skips without it, under CI=true it fails.
func TestDeployPromtool(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool not found under CI (.ci/run installs Debian's prometheus): %v", err)
		}
		t.Skip("promtool not installed (apt-get install prometheus): the rules' own unit tests are not run")
	}
	_, qs := loadDashboard(t)
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	fill := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "${DS_PROMETHEUS}", "", "$job", ".+", "$task", ".+")
	for i, q := range qs {
		fmt.Fprintf(&b, "      - record: dashboard:query_%d\n        expr: %s\n", i, strconv.Quote(fill.Replace(q.expr)))
	}
	dashRules := filepath.Join(t.TempDir(), "dashboard-queries.yml")
	if err := os.WriteFile(dashRules, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"check", "rules", filepath.Base(alertRulesPath)},
		{"test", "rules", filepath.Base(alertTestsPath)},
		{"check", "rules", dashRules},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = filepath.Dir(alertRulesPath)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
