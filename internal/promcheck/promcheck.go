// Package promcheck reads the PromQL of the monitoring kit (the alert rules, the Grafana
// dashboard) and lists the metrics it uses, so that tests can hold them against the
// metrics `serve` exports: a scrape of it, or its registry.
package promcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// Query is one PromQL expression of the kit and where it is.
type Query struct {
	// Where names it: "alert <name>", or "panel <title> (<refId>)".
	Where string
	Expr  string
}

// Grafana's interval variables stand for a range; other variables for label values.
var (
	intervalVar = regexp.MustCompile(`\$\{?__(rate_interval|interval|range)\}?`)
	otherVar    = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*(:[a-z]+)?\}?`)
	labelValues = regexp.MustCompile(`^\s*label_values\((.+),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)
)

// Metrics parses expr with the Prometheus parser (Grafana's $variables replaced: the
// interval ones by 5m, the others by a regular expression that matches anything) and
// returns the metric names it selects, sorted. A selector without a metric name is an
// error: it could not be checked.
func Metrics(expr string) ([]string, error) {
	if m := labelValues.FindStringSubmatch(expr); m != nil { // a Grafana variable query
		expr = m[1]
	}
	expr = otherVar.ReplaceAllString(intervalVar.ReplaceAllString(expr, "5m"), ".*")
	parsed, err := parser.ParseExpr(expr)
	if err != nil {
		return nil, fmt.Errorf("parse %q: %w", expr, err)
	}
	names := map[string]bool{}
	var errs []error
	parser.Inspect(parsed, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			errs = append(errs, fmt.Errorf("selector %s names no metric", vs))
			return nil
		}
		names[name] = true
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return sortedKeys(names), nil
}

// RuleQueries returns the alert and recording rules' expressions of a Prometheus rule
// file.
func RuleQueries(data []byte) ([]Query, error) {
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert  string `json:"alert"`
				Record string `json:"record"`
				Expr   string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("read rule file: %w", err)
	}
	var out []Query
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			where := "alert " + r.Alert
			if r.Record != "" {
				where = "record " + r.Record
			}
			out = append(out, Query{Where: where, Expr: r.Expr})
		}
	}
	if len(out) == 0 {
		return nil, errors.New("read rule file: no rules")
	}
	return out, nil
}

// dashboardPanel is the part of a Grafana panel that holds queries.
type dashboardPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"` // a collapsed row's
}

// DashboardQueries returns every panel query (rows' nested panels too) and every
// variable query of a Grafana dashboard's JSON. A panel without a query is an error:
// it would show nothing.
func DashboardQueries(data []byte) ([]Query, error) {
	var dash struct {
		Panels     []dashboardPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		return nil, fmt.Errorf("read dashboard: %w", err)
	}
	var out []Query
	var errs []error
	var walk func(ps []dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			if p.Panels != nil { // a row
				walk(p.Panels)
				continue
			}
			if len(p.Targets) == 0 {
				errs = append(errs, fmt.Errorf("panel %q has no query", p.Title))
			}
			for _, t := range p.Targets {
				if strings.TrimSpace(t.Expr) == "" {
					errs = append(errs, fmt.Errorf("panel %q (%s) has an empty query", p.Title, t.RefID))
					continue
				}
				out = append(out, Query{Where: fmt.Sprintf("panel %q (%s)", p.Title, t.RefID), Expr: t.Expr})
			}
		}
	}
	walk(dash.Panels)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				errs = append(errs, fmt.Errorf("variable %q: query is neither a string nor an object with one", v.Name))
				continue
			}
			q = obj.Query
		}
		out = append(out, Query{Where: fmt.Sprintf("variable %q", v.Name), Expr: q})
	}
	if len(out) == 0 {
		errs = append(errs, errors.New("read dashboard: no queries"))
	}
	return out, errors.Join(errs...)
}

// Exported is the set of series names a list of metric families yields: a histogram's
// _bucket, _sum and _count, a summary's _sum and _count, besides the family name.
func Exported(families []*dto.MetricFamily) map[string]bool {
	out := map[string]bool{}
	for _, f := range families {
		Add(out, f.GetName(), f.GetType())
	}
	return out
}

// Add puts name, and the series names of its type, into set.
func Add(set map[string]bool, name string, typ dto.MetricType) {
	set[name] = true
	switch typ {
	case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
		set[name+"_bucket"], set[name+"_sum"], set[name+"_count"] = true, true, true
	case dto.MetricType_SUMMARY:
		set[name+"_sum"], set[name+"_count"] = true, true
	}
}

// Unexported checks every query against exported (the series names serve exports)
// and returns an error naming each metric that is not there and where it is used;
// allowed lists metrics to let pass (with the caller's reason).
func Unexported(queries []Query, exported, allowed map[string]bool) error {
	var errs []error
	for _, q := range queries {
		names, err := Metrics(q.Expr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", q.Where, err))
			continue
		}
		for _, n := range names {
			if !exported[n] && !allowed[n] {
				errs = append(errs, fmt.Errorf("%s uses %s, which serve does not export", q.Where, n))
			}
		}
	}
	return errors.Join(errs...)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
