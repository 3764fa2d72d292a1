package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

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
