package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// The deployment files, relative to this package.
const (
	dashboardPath  = "../deploy/grafana/slotd-dashboard.json"
	alertRulesPath = "../deploy/prometheus/slotd-alerts.yml"
	alertTestsPath = "../deploy/prometheus/slotd-alerts.test.yml"
)

// query is one PromQL expression of a deployment file and where it is.
type query struct {
	where string // "dashboard panel \"Runs by outcome\" target A", "alert SlotdRedisDown"
	expr  string
}

// ---- PromQL, as far as the tests need it ----

// promqlRef is a metric name an expression selects, with the label names
// its matchers use.
type promqlRef struct {
	metric string
	labels []string
	values map[string]string // label -> value, for = and != matchers
}

// promqlNames is what an expression refers to: metrics (with their
// matchers' labels), and label names used in by/without/on/ignoring/
// group_left/group_right clauses.
type promqlNames struct {
	refs     []promqlRef
	grouping []string
	byLists  [][]string // the label lists of the by clauses, in order
}

// promqlKeywords are the identifiers of PromQL that are not metric names
// when they are not followed by "(": keywords, and the aggregation
// operators, which may be followed by their by/without clause.
var promqlKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true,
	"inf": true, "nan": true, "Inf": true, "NaN": true, "start": true, "end": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
}

// grafanaVar matches Grafana's template variables: $name, ${name},
// ${name:format}, [[name]].
var grafanaVar = regexp.MustCompile(`\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|\[\[[A-Za-z0-9_:]+\]\]`)

var labelMatcher = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`" + `)`)

// parsePromQL extracts the names an expression refers to. It is a small
// tokenizer, not a parser: it skips strings, reads {label matchers} after
// a metric name, skips [ranges], treats an identifier followed by "(" as a
// function or aggregation, and reads the label lists of grouping clauses.
// Everything else that looks like an identifier and is not a keyword is a
// metric name. Grafana's variables are removed first.
func parsePromQL(expr string) (promqlNames, error) {
	s := grafanaVar.ReplaceAllString(expr, "")
	var out promqlNames
	lastMetric := -1 // index in out.refs of a metric name that a {...} may follow
	depth := 0       // of parentheses
	i := 0
	skipSpace := func(j int) int {
		for j < len(s) && strings.ContainsRune(" \t\r\n", rune(s[j])) {
			j++
		}
		return j
	}
	// closing finds the index just past the bracket that closes the one at
	// i, skipping quoted strings.
	closing := func(i int, lb, rb byte) (int, error) {
		depth := 0
		for j := i; j < len(s); j++ {
			switch c := s[j]; c {
			case '"', '\'', '`':
				k := j + 1
				for k < len(s) && s[k] != c {
					if s[k] == '\\' && c != '`' {
						k++
					}
					k++
				}
				j = k
			case lb:
				depth++
			case rb:
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("unbalanced %c at offset %d in %q", lb, i, expr)
	}
	for i < len(s) {
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(s) {
				return out, fmt.Errorf("unterminated string in %q", expr)
			}
			i = j + 1
			lastMetric = -1
		case c == '{':
			j, err := closing(i, '{', '}')
			if err != nil {
				return out, err
			}
			body := s[i+1 : j-1]
			ref := promqlRef{values: map[string]string{}}
			if lastMetric >= 0 {
				ref = out.refs[lastMetric]
			}
			for _, m := range labelMatcher.FindAllStringSubmatch(body, -1) {
				ref.labels = append(ref.labels, m[1])
				if m[2] == "=" || m[2] == "!=" {
					if v, err := strconv.Unquote(m[3]); err == nil {
						ref.values[m[1]] = v
					}
				}
			}
			if lastMetric >= 0 {
				out.refs[lastMetric] = ref
			} else if name, ok := ref.values["__name__"]; ok {
				ref.metric = name
				out.refs = append(out.refs, ref)
			} else {
				return out, fmt.Errorf("a selector without a metric name in %q", expr)
			}
			i = j
			lastMetric = -1
		case c == '[':
			j, err := closing(i, '[', ']')
			if err != nil {
				return out, err
			}
			i = j
			lastMetric = -1
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			j := i
			for j < len(s) && (isIdentByte(s[j]) || s[j] == '.' || (s[j] == '+' || s[j] == '-') && (s[j-1] == 'e' || s[j-1] == 'E')) {
				j++
			}
			i = j
			lastMetric = -1
		case isIdentStart(c):
			j := i
			for j < len(s) && (isIdentByte(s[j]) || s[j] == ':') {
				j++
			}
			word := s[i:j]
			k := skipSpace(j)
			followedByParen := k < len(s) && s[k] == '('
			switch {
			case followedByParen && slices.Contains([]string{"by", "without", "on", "ignoring", "group_left", "group_right"}, word):
				end, err := closing(k, '(', ')')
				if err != nil {
					return out, err
				}
				var list []string
				for _, l := range strings.Split(s[k+1:end-1], ",") {
					if l = strings.TrimSpace(l); l != "" {
						list = append(list, l)
					}
				}
				out.grouping = append(out.grouping, list...)
				if word == "by" {
					out.byLists = append(out.byLists, list)
				}
				i = end
				lastMetric = -1
			case followedByParen: // a function or an aggregation
				i = j
				lastMetric = -1
			case promqlKeywords[word]:
				i = j
				lastMetric = -1
			default:
				out.refs = append(out.refs, promqlRef{metric: word, values: map[string]string{}})
				lastMetric = len(out.refs) - 1
				i = j
				if k < len(s) && s[k] == '{' {
					i = k // the matchers belong to this name
				}
			}
		default:
			i++
			if !strings.ContainsRune(" \t\r\n", rune(c)) {
				lastMetric = -1
			}
			switch c {
			case '(':
				depth++
			case ')':
				if depth--; depth < 0 {
					return out, fmt.Errorf("unbalanced ) at offset %d in %q", i-1, expr)
				}
			case '}', ']':
				return out, fmt.Errorf("unbalanced %c at offset %d in %q", c, i-1, expr)
			}
		}
	}
	if depth != 0 {
		return out, fmt.Errorf("unbalanced ( in %q", expr)
	}
	return out, nil
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdentByte(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

func TestParsePromQL(t *testing.T) {
	t.Parallel()
	n, err := parsePromQL(`histogram_quantile(0.99, sum by (task, le) (rate(slotd_start_delay_seconds_bucket{job=~"$job", task=~"${task}"}[$__rate_interval])))
		/ on (task) group_left max without (instance) (x:y_z offset 5m) > bool 2 * abs({__name__="named", a="b}"}) or vector(1e-3)`)
	if err != nil {
		t.Fatal(err)
	}
	var metrics []string
	for _, r := range n.refs {
		metrics = append(metrics, r.metric+"{"+strings.Join(r.labels, ",")+"}")
	}
	want := []string{"slotd_start_delay_seconds_bucket{job,task}", "x:y_z{}", "named{__name__,a}"}
	if !slices.Equal(metrics, want) {
		t.Errorf("metrics %v, want %v", metrics, want)
	}
	if want := []string{"task", "le", "task", "instance"}; !slices.Equal(n.grouping, want) {
		t.Errorf("grouping labels %v, want %v", n.grouping, want)
	}
	if _, err := parsePromQL(`sum(rate(x[5m])`); err == nil {
		t.Errorf("unbalanced parenthesis not reported")
	}
	if _, err := parsePromQL(`x{a="b}`); err == nil {
		t.Errorf("unbalanced brace not reported")
	}
}

// ---- the Grafana dashboard ----

// dashboard is the part of Grafana's dashboard model the test reads.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
			Datasource *datasource     `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		RefID        string      `json:"refId"`
		Expr         string      `json:"expr"`
		LegendFormat string      `json:"legendFormat"`
		Datasource   *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

// dsVar is the name of the dashboard's data source variable.
const dsVar = "DS_PROMETHEUS"

// loadDashboard parses the dashboard and returns it with its PromQL: the
// targets' expressions and the selectors of its label_values() variables.
func loadDashboard(t *testing.T) (*dashboard, []query) {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	var qs []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				qs = append(qs, query{fmt.Sprintf("dashboard panel %q target %s", p.Title, tg.RefID), tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := v.Definition
		var obj struct{ Query string }
		if json.Unmarshal(v.Query, &obj) == nil && obj.Query != "" {
			q = obj.Query
		} else if s, err := strconv.Unquote(string(v.Query)); err == nil && s != "" {
			q = s
		}
		m := labelValuesRE.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("dashboard variable %s: query %q, want label_values(<selector>, <label>)", v.Name, q)
			continue
		}
		qs = append(qs, query{fmt.Sprintf("dashboard variable %s", v.Name), m[1]},
			// The label whose values it lists must be one of the selector's.
			query{fmt.Sprintf("dashboard variable %s (label)", v.Name), fmt.Sprintf("max by (%s) (%s)", m[2], m[1])})
	}
	return &d, qs
}

var labelValuesRE = regexp.MustCompile(`^\s*label_values\(\s*(.+?)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)

// The dashboard is valid JSON for Grafana's schema 39: a data source
// variable every panel and target uses, a task variable listing the tasks
// of slotd_runs_total, unique panel ids, panels that fit the 24-column grid
// without overlapping, expressions that parse, and the panels the issue
// asks for.
func TestDashboardStructure(t *testing.T) {
	t.Parallel()
	d, qs := loadDashboard(t)
	if d.SchemaVersion < 36 || d.SchemaVersion > 41 {
		t.Errorf("schemaVersion %d, want 39 or so", d.SchemaVersion)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: want both", d.UID, d.Title)
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		switch v.Name {
		case dsVar:
			if v.Type != "datasource" || string(v.Query) != `"prometheus"` {
				t.Errorf("variable %s: type %q query %s, want a prometheus datasource variable", v.Name, v.Type, v.Query)
			}
		case "task":
			if !strings.Contains(string(v.Query), "label_values(slotd_runs_total") {
				t.Errorf("variable task: query %s, want label_values(slotd_runs_total..., task)", v.Query)
			}
		}
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != "${"+dsVar+"}") {
			t.Errorf("variable %s: datasource %+v, want uid ${%s}", v.Name, v.Datasource, dsVar)
		}
	}
	for _, name := range []string{dsVar, "task"} {
		if !vars[name] {
			t.Errorf("no %s variable", name)
		}
	}

	type rect struct {
		title      string
		x, y, w, h int
	}
	var rects []rect
	ids := map[int]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if prev, dup := ids[p.ID]; dup || p.ID <= 0 {
				t.Errorf("panel %q: id %d (also %q)", p.Title, p.ID, prev)
			}
			ids[p.ID] = p.Title
			g := p.GridPos
			if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
				t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
			}
			rects = append(rects, rect{p.Title, g.X, g.Y, g.W, g.H})
			if p.Type != "row" {
				if p.Title == "" {
					t.Errorf("panel %d has no title", p.ID)
				}
				if p.Datasource == nil || p.Datasource.UID != "${"+dsVar+"}" {
					t.Errorf("panel %q: datasource %+v, want uid ${%s}", p.Title, p.Datasource, dsVar)
				}
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no targets", p.Title)
				}
			}
			for _, tg := range p.Targets {
				if tg.Datasource == nil || tg.Datasource.UID != "${"+dsVar+"}" {
					t.Errorf("panel %q target %s: datasource %+v, want uid ${%s}", p.Title, tg.RefID, tg.Datasource, dsVar)
				}
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q target %s: empty expr", p.Title, tg.RefID)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for i, a := range rects {
		for _, b := range rects[i+1:] {
			if a.x < b.x+b.w && b.x < a.x+a.w && a.y < b.y+b.h && b.y < a.y+a.h {
				t.Errorf("panels %q and %q overlap", a.title, b.title)
			}
		}
	}

	// What the issue asks the dashboard to show.
	all := ""
	for _, q := range qs {
		if _, err := parsePromQL(q.expr); err != nil {
			t.Errorf("%s: %v", q.where, err)
		}
		all += q.expr + "\n"
	}
	for _, want := range []string{
		"rate(slotd_runs_total", `outcome!="success"`,
		"histogram_quantile(0.5, sum by (task, le) (rate(slotd_start_delay_seconds_bucket",
		"histogram_quantile(0.99, sum by (task, le) (rate(slotd_start_delay_seconds_bucket",
		"histogram_quantile(0.5, sum by (task, le) (rate(slotd_task_duration_seconds_bucket",
		"histogram_quantile(0.99, sum by (task, le) (rate(slotd_task_duration_seconds_bucket",
		"slotd_lease_renewals_total", "slotd_lease_losses_total",
		"slotd_slots_exhausted_total", "slotd_slots_missed_total",
		"slotd_clock_skew_seconds", "slotd_redis_up", "slotd_running_tasks",
		"time() - max by (task) (slotd_last_success_timestamp_seconds",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no dashboard query contains %q", want)
		}
	}
	checkMissedIsMax(t, qs)
}

// checkMissedIsMax: every replica watching a slot counts its miss, so
// slotd_slots_missed_total is never summed over replicas.
func checkMissedIsMax(t *testing.T, qs []query) {
	t.Helper()
	for _, q := range qs {
		if strings.Contains(q.expr, "slotd_slots_missed_total") && regexp.MustCompile(`\bsum\b`).MatchString(q.expr) {
			t.Errorf("%s sums slotd_slots_missed_total: every watching replica counts a miss, use max: %s", q.where, q.expr)
		}
	}
}

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

// ---- the metrics a running daemon exports ----

// exported is what a scrape shows: each sample name (a histogram's
// name_bucket, name_sum and name_count) with its label names, and each
// label's values.
type exported struct {
	labels map[string][]string            // sample name -> label names (with job, instance, as Prometheus adds)
	values map[string]map[string][]string // sample name -> label -> values seen
}

func exportedFrom(mfs families) exported {
	e := exported{labels: map[string][]string{}, values: map[string]map[string][]string{}}
	add := func(name string, labels []*dto.LabelPair, extra ...string) {
		ls := append([]string{"job", "instance"}, extra...)
		if e.values[name] == nil {
			e.values[name] = map[string][]string{}
		}
		for _, lp := range labels {
			ls = append(ls, lp.GetName())
			if !slices.Contains(e.values[name][lp.GetName()], lp.GetValue()) {
				e.values[name][lp.GetName()] = append(e.values[name][lp.GetName()], lp.GetValue())
			}
		}
		for _, l := range ls {
			if !slices.Contains(e.labels[name], l) {
				e.labels[name] = append(e.labels[name], l)
			}
		}
	}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				add(name+"_bucket", m.GetLabel(), "le")
				add(name+"_sum", m.GetLabel())
				add(name+"_count", m.GetLabel())
			case dto.MetricType_SUMMARY:
				add(name, m.GetLabel(), "quantile")
				add(name+"_sum", m.GetLabel())
				add(name+"_count", m.GetLabel())
			default:
				add(name, m.GetLabel())
			}
		}
	}
	return e
}

// referenced lists the metric names of queries.
func referenced(t *testing.T, qs []query) []string {
	t.Helper()
	var names []string
	for _, q := range qs {
		n, err := parsePromQL(q.expr)
		if err != nil {
			t.Fatalf("%s: %v", q.where, err)
		}
		for _, r := range n.refs {
			if !slices.Contains(names, r.metric) {
				names = append(names, r.metric)
			}
		}
	}
	slices.Sort(names)
	return names
}

// Every metric the dashboard and the alert rules refer to is one a running
// slotd exports, with the labels they match and group on, and the
// outcome/result values they filter by.
//
// The daemon creates a task's series when it first counts something for
// that task, so the exported set is read from a replica that goes through
// every event the files look at: ok succeeds; broken fails with
// max_attempts 1 (exhausted slots); late fails slowly past its window
// (missed slots); hold runs long enough to renew its lease, and then the
// test deletes its lock in Redis, so its next renewal finds it gone (a lost
// lease).
func TestDeployMetricsExported(t *testing.T) {
	t.Parallel()
	_, dqs := loadDashboard(t)
	_, aqs := loadAlertRules(t)
	qs := append(dqs, aqs...)
	names := referenced(t, qs)

	c := newCluster(t)
	c.start(1, "1s", `lease = "1s"
max_attempts = 3
timeout = "1m"
catchup = "latest"`,
		c.execTask("ok", "@every 1s", `exit 0`, ""),
		c.execTask("broken", "@every 1s", `exit 1`, "max_attempts = 1"),
		c.execTask("late", "@every 2s", `sleep 1.2; exit 1`, ""),
		c.execTask("hold", "@every 20s", `rec start; sleep 10; rec end`, ""))
	addr := c.reps[0].httpAddr(15 * time.Second)

	evs := c.ledger.await("hold to start", 30*time.Second, func(evs []event) bool { return len(find(evs, "start", 0)) > 0 })
	slot := find(evs, "start", 0)[0].Slot
	awaitScrape(t, []string{addr}, "a lease renewal of hold", 15*time.Second, func(s []families) bool {
		return sumOver(s, "slotd_lease_renewals_total", "task", "hold") > 0
	})
	if err := c.rdb.Del(t.Context(), stateKey("hold", slot)).Err(); err != nil {
		t.Fatal(err)
	}

	// The series the events above create; the run waits for them too.
	events := []struct{ metric, label, value string }{
		{"slotd_runs_total", "outcome", "success"},
		{"slotd_runs_total", "outcome", "failure"},
		{"slotd_runs_total", "outcome", "lease_lost"},
		{"slotd_slots_exhausted_total", "task", "broken"},
		{"slotd_slots_missed_total", "task", "late"},
		{"slotd_lease_losses_total", "task", "hold"},
	}
	var exp exported
	var missing []string
	var notYet []string
	deadline := time.Now().Add(20 * time.Second)
	for {
		mfs, err := scrapeMetrics(addr)
		if err != nil {
			t.Fatal(err)
		}
		exp = exportedFrom(mfs)
		missing = slices.DeleteFunc(slices.Clone(names), func(n string) bool { return exp.labels[n] != nil })
		notYet = nil
		for _, e := range events {
			if !slices.Contains(exp.values[e.metric][e.label], e.value) {
				notYet = append(notYet, fmt.Sprintf("%s{%s=%q}", e.metric, e.label, e.value))
			}
		}
		if len(missing) == 0 && len(notYet) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, n := range missing {
		var where []string
		for _, q := range qs {
			if nn, _ := parsePromQL(q.expr); slices.ContainsFunc(nn.refs, func(r promqlRef) bool { return r.metric == n }) {
				where = append(where, q.where)
			}
		}
		t.Errorf("%s is referenced by %s but the daemon does not export it", n, strings.Join(where, ", "))
	}
	if len(missing) > 0 {
		var have []string
		for n := range exp.labels {
			have = append(have, n)
		}
		slices.Sort(have)
		t.Fatalf("exported: %s", strings.Join(have, " "))
	}

	// Labels: each matcher's label exists on its metric, each grouping
	// label on some referenced metric; outcome and result values are ones
	// the daemon uses (README, Metrics).
	known := map[string][]string{
		"outcome": {"success", "failure", "timeout", "lease_lost", "canceled"},
		"result":  {"won", "held", "done", "exhausted", "early", "late", "error"},
	}
	for _, q := range qs {
		n, _ := parsePromQL(q.expr)
		var all []string
		for _, r := range n.refs {
			for _, l := range r.labels {
				if l != "__name__" && !slices.Contains(exp.labels[r.metric], l) {
					t.Errorf("%s: %s has no label %q (it has %v)", q.where, r.metric, l, exp.labels[r.metric])
				}
			}
			for l, v := range r.values {
				if vals, ok := known[l]; ok && !slices.Contains(vals, v) {
					t.Errorf("%s: %s{%s=%q}: the daemon never sets %s to %q (%v)", q.where, r.metric, l, v, l, v, vals)
				}
			}
			all = append(all, exp.labels[r.metric]...)
		}
		for _, l := range n.grouping {
			if !slices.Contains(all, l) {
				t.Errorf("%s: groups by %q, which none of its metrics has", q.where, l)
			}
		}
	}
	if len(notYet) > 0 {
		t.Errorf("not exported within 20s: %s: the test's tasks did not do what it expected", strings.Join(notYet, ", "))
	}
	t.Logf("%d metric names referenced, all exported: %s", len(names), strings.Join(names, " "))
	for _, task := range []string{"ok", "broken", "late", "hold"} {
		mfs, _ := scrapeMetrics(addr)
		f := families(mfs)
		t.Logf("%s: runs %v, missed %v, exhausted %v", task, f.samples("slotd_runs_total", "task", task),
			f.samples("slotd_slots_missed_total", "task", task), f.samples("slotd_slots_exhausted_total", "task", task))
	}
}
