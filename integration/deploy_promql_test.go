package integration

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

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
