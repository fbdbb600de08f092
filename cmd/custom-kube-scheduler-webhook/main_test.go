package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

func run(args ...string) (stdout string, err error) {
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err = cmd.Execute()
	return out.String(), err
}

func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if err != nil {
		return 1
	}
	return 0
}

func TestPlanJSON(t *testing.T) {
	out, err := run("plan", "--replicas", "10", "--output", "json", "--strategy",
		"nodesize=od4vcpu16gb,base=1,weight=0:nodesize=spot4vcpu16gb,weight=1:nodesize=spot8vcpu32gb,weight=1")
	if err != nil {
		t.Fatal(err)
	}
	var doc planDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var counts []int
	for _, term := range doc.Terms {
		counts = append(counts, term.Count)
	}
	if !reflect.DeepEqual(counts, []int{1, 4, 5}) || doc.Terms[0].Labels["nodesize"] != "od4vcpu16gb" || doc.Terms[0].Base != 1 || doc.Terms[2].Weight != 1 {
		t.Fatalf("plan: %+v", doc)
	}
}

// -o yaml has the JSON form's fields; -o table is the default and -o text its old name.
func TestPlanYAMLAndTable(t *testing.T) {
	strat := "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"
	out, err := run("plan", "--replicas", "100", "-o", "yaml", "--strategy", strat)
	if err != nil {
		t.Fatal(err)
	}
	var doc planDoc
	if err := yaml.UnmarshalStrict([]byte(out), &doc); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if doc.Replicas != 100 || len(doc.Terms) != 2 || doc.Terms[0].Count != 26 || doc.Terms[1].Count != 74 || !strings.Contains(out, "count: 74") {
		t.Fatalf("plan -o yaml:\n%s", out)
	}
	table, err := run("plan", "--replicas", "100", "--strategy", strat)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{"table", "text"} {
		if again, err := run("plan", "--replicas", "100", "-o", o, "--strategy", strat); err != nil || again != table {
			t.Errorf("-o %s differs from the default table (%v):\n%s", o, err, again)
		}
	}
	_, err = run("plan", "--replicas", "1", "-o", "xml", "--strategy", strat)
	if err == nil || !strings.Contains(err.Error(), "table, json or yaml") {
		t.Errorf("-o xml: %v, want an error naming table, json or yaml", err)
	}
}

// An unknown capacity type is accepted (users may add their own) with a warning.
func TestPlanWarnsOnUnknownCapacityType(t *testing.T) {
	out, err := run("plan", "--replicas", "2", "--strategy", "karpenter.sh/capacity-type=spotty")
	if err != nil {
		t.Fatalf("spotty refused: %v", err)
	}
	if !strings.Contains(out, "warning: term 1 (karpenter.sh/capacity-type=spotty)") || !strings.Contains(out, "spot, on-demand, reserved") {
		t.Fatalf("no warning about spotty:\n%s", out)
	}
}

func TestPlanText(t *testing.T) {
	out, err := run("plan", "--replicas", "100", "--strategy", "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[1], " 26") || !strings.HasSuffix(lines[2], " 74") {
		t.Fatalf("plan text:\n%s", out)
	}
}

func TestPlanBadInputExitsTwo(t *testing.T) {
	cases := map[string][]string{
		"invalid strategy": {"plan", "--strategy", "a=1,weight=x"},
		"missing strategy": {"plan", "--replicas", "3"},
		"negative":         {"plan", "--strategy", "a=1", "--replicas", "-1"},
		"bad output":       {"plan", "--strategy", "a=1", "-o", "xml"},
		"unknown flag":     {"plan", "--bogus"},
		"not a number":     {"plan", "--strategy", "a=1", "--replicas", "ten"},
	}
	for name, args := range cases {
		_, err := run(args...)
		if code := exitCode(err); code != 2 {
			t.Errorf("%s: exit %d (%v), want 2", name, code, err)
		}
	}
	_, err := run("plan", "--strategy", "a=1,weight=x")
	if err == nil || err.Error() != `term 1 ("a=1,weight=x"): weight "x" is not a non-negative integer` {
		t.Errorf("message: %v", err)
	}
}

func serveFlags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	addSettingFlags(fs, serveSettings)
	addRetiredFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestServeConfigDefaults(t *testing.T) {
	for _, s := range serveSettings {
		t.Setenv(s.env, "")
	}
	cfg, err := loadServeConfig(serveFlags(t))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LogLevel != logrus.InfoLevel || !reflect.DeepEqual(cfg.Namespaces.Blocklist, map[string]bool{"kube-system": true, "kube-public": true}) ||
		cfg.Serving.ListenAddress != ":9443" || cfg.Ledger.ReservationTTL != 30*time.Second || cfg.WarnOnly || cfg.Certs.Self ||
		cfg.Namespaces.Own != "custom-kube-scheduler-webhook" || cfg.Serving.MetricsAddress != ":8080" || cfg.Serving.HealthAddress != ":8081" {
		t.Fatalf("defaults: %+v", cfg)
	}
}

// METRICS_ADDRESS and HEALTH_ADDRESS take "0" for off, as controller-runtime does.
func TestServeConfigPlainAddressesOff(t *testing.T) {
	t.Setenv("METRICS_ADDRESS", "0")
	cfg, err := loadServeConfig(serveFlags(t, "--health-address", "127.0.0.1:18081"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Serving.MetricsAddress != "" || cfg.Serving.HealthAddress != "127.0.0.1:18081" {
		t.Fatalf("METRICS_ADDRESS=0, --health-address 127.0.0.1:18081: %q, %q", cfg.Serving.MetricsAddress, cfg.Serving.HealthAddress)
	}
}

func TestServeConfigEnvironmentThenFlags(t *testing.T) {
	t.Setenv("LOG_LEVEL", "DEBUG")
	t.Setenv("BLOCKLISTED_NAMESPACE_LIST", " kube-system , default,, team-a ")
	t.Setenv("RESERVATION_TTL", "45s")
	t.Setenv("VALIDATION_MODE", "warn")
	t.Setenv("LISTEN_ADDRESS", ":8443")
	cfg, err := loadServeConfig(serveFlags(t, "--listen-address", "127.0.0.1:9999"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LogLevel != logrus.DebugLevel || cfg.Ledger.ReservationTTL != 45*time.Second || !cfg.WarnOnly {
		t.Fatalf("environment not read: %+v", cfg)
	}
	if want := map[string]bool{"kube-system": true, "default": true, "team-a": true}; !reflect.DeepEqual(cfg.Namespaces.Blocklist, want) {
		t.Fatalf("blocklist %v, want %v", cfg.Namespaces.Blocklist, want)
	}
	if cfg.Serving.ListenAddress != "127.0.0.1:9999" {
		t.Fatalf("a given flag overrides the environment: %s", cfg.Serving.ListenAddress)
	}
}

func TestServeConfigErrors(t *testing.T) {
	cases := map[string]string{
		"LOG_LEVEL":       "loud",
		"RESERVATION_TTL": "soon",
		"VALIDATION_MODE": "maybe",
		"CERT_MODE":       "magic",
		"LEDGER":          "disk",
		"METRICS_ADDRESS": "8080",
		"HEALTH_ADDRESS":  "localhost",
	}
	for env, value := range cases {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, value)
			_, err := loadServeConfig(serveFlags(t))
			if err == nil || !strings.Contains(err.Error(), env) {
				t.Fatalf("%s=%s: error %v does not name the setting", env, value, err)
			}
		})
	}
	// The self-managed certificate and key are written into one directory.
	t.Run("TLS_KEY_FILE", func(t *testing.T) {
		t.Setenv("CERT_MODE", "self")
		t.Setenv("TLS_CERT_FILE", "/a/tls.crt")
		t.Setenv("TLS_KEY_FILE", "/b/tls.key")
		if _, err := loadServeConfig(serveFlags(t)); err == nil || !strings.Contains(err.Error(), "TLS_CERT_FILE and TLS_KEY_FILE must share it") {
			t.Fatalf("CERT_MODE=self with two directories: %v", err)
		}
	})
	// The original project's "INFO" and empty value still work.
	t.Setenv("LOG_LEVEL", "INFO")
	if _, err := loadServeConfig(serveFlags(t)); err != nil {
		t.Fatal(err)
	}
}

// LEDGER is gone: its old values start the webhook with a deprecation warning.
func TestDeprecatedLedgerSetting(t *testing.T) {
	for _, v := range []string{"memory", "lease"} {
		t.Setenv("LEDGER", v)
		cfg, err := loadServeConfig(serveFlags(t))
		if err != nil {
			t.Fatalf("LEDGER=%s: %v", v, err)
		}
		if len(cfg.Deprecations) != 1 || !strings.Contains(cfg.Deprecations[0], "LEDGER="+v+" is deprecated") {
			t.Fatalf("LEDGER=%s: deprecations %v", v, cfg.Deprecations)
		}
	}
}

// A retired setting starts the webhook with a warning, from the environment or a flag.
func TestRetiredSettings(t *testing.T) {
	for _, r := range retiredSettings {
		t.Setenv(r.env, "1m")
	}
	cfg, err := loadServeConfig(serveFlags(t, "--image-cache-size", "100", "--cost-metrics-interval=1h"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Deprecations) != len(retiredSettings) || !strings.Contains(cfg.Deprecations[0], "NODEGROUP_REFRESH_INTERVAL=1m is deprecated and ignored") {
		t.Fatalf("deprecations %v", cfg.Deprecations)
	}
}

// readmeRow is the row of a setting in the configuration table of docs/configuration.md
// (the README's table until the docs moved there).
func readmeRow(s setting) string {
	def := "`" + s.def + "`"
	if s.def == "" {
		def = "(empty)"
	}
	return fmt.Sprintf("| `%s` | `--%s` | %s | %s |", s.env, s.key, def, s.usage)
}

// The configuration table of docs/configuration.md lists every setting exactly as the
// code has it. (The name stays from when the table was in the README.)
func TestREADMEConfigurationTable(t *testing.T) {
	const path = "../../docs/configuration.md"
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range serveSettings {
		if row := readmeRow(s); !strings.Contains(string(page), row+"\n") {
			t.Errorf("%s lacks the row\n%s", path, row)
		}
	}
}

// plan prints a strategy's warnings (a term containing another's) before the plan.
func TestPlanWarnsOnContainedTerms(t *testing.T) {
	out, err := run("plan", "--replicas", "2", "--strategy", "a=1:a=1,b=2")
	if err != nil || !strings.Contains(out, "warning: term 2 (a=1,b=2) selects every label of term 1 (a=1)") {
		t.Fatalf("plan: %v\n%s", err, out)
	}
	if _, err := run("plan", "--strategy", "a=1:a=1"); exitCode(err) != 2 {
		t.Fatalf("identical terms: exit %d, want 2", exitCode(err))
	}
}

func TestVersion(t *testing.T) {
	old := []string{version, revision, buildDate}
	version, revision, buildDate = "1.2.3", "0123456789ab", "2026-01-02T03:04:05Z"
	t.Cleanup(func() { version, revision, buildDate = old[0], old[1], old[2] })

	want := "custom-kube-scheduler-webhook 1.2.3 (revision 0123456789ab, built 2026-01-02T03:04:05Z, " + runtime.Version() + ")\n"
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, err := run(args...)
		if err != nil || out != want {
			t.Errorf("%v: %q, %v; want %q", args, out, err, want)
		}
	}
	out, err := run("version", "-o", "json")
	var b buildInfo
	if err != nil || json.Unmarshal([]byte(out), &b) != nil || b.Version != "1.2.3" || b.GoVersion != runtime.Version() {
		t.Errorf("version -o json: %q, %v", out, err)
	}
	if _, err := run("version", "-o", "yaml"); exitCode(err) != 2 {
		t.Errorf("version -o yaml: exit %d, want 2", exitCode(err))
	}
}

func TestBuildInfoGauge(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newBuildInfoGauge("ns", buildInfo{Version: "1.2.3", Revision: "abc", GoVersion: "go1.2"}))
	got, err := reg.Gather()
	if err != nil || len(got) != 1 || got[0].GetName() != "ns_build_info" || got[0].GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Fatalf("gathered %v, %v", got, err)
	}
	labels := map[string]string{}
	for _, l := range got[0].GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if !reflect.DeepEqual(labels, map[string]string{"version": "1.2.3", "revision": "abc", "goversion": "go1.2"}) {
		t.Fatalf("labels %v", labels)
	}
}

// serve's settings are read before its log level is known; an invalid one is still
// logged in serve's JSON format (with sub-second timestamps), and main prints nothing
// more (logged).
func TestServeInvalidSettingIsLoggedAsJSON(t *testing.T) {
	t.Run("flag", func(t *testing.T) { checkLoggedAsJSON(t, "loud", "serve", "--log-level", "loud") })
	t.Run("environment", func(t *testing.T) {
		t.Setenv("RESERVATION_TTL", "soon")
		checkLoggedAsJSON(t, "soon", "serve")
	})
}

func checkLoggedAsJSON(t *testing.T, bad string, args ...string) {
	t.Helper()
	out, err := run(args...)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 || !ee.logged {
		t.Fatalf("want a logged exit 2, got %#v", err)
	}
	var line struct {
		Level, Msg, Error, Time string
	}
	if jerr := json.Unmarshal([]byte(strings.TrimSpace(out)), &line); jerr != nil {
		t.Fatalf("not one JSON log line: %v\n%s", jerr, out)
	}
	if line.Level != "error" || !strings.Contains(line.Error, bad) {
		t.Errorf("log line %+v, want level error naming the bad value", line)
	}
	ts, perr := time.Parse(time.RFC3339Nano, line.Time)
	if perr != nil || !strings.Contains(line.Time, ".") {
		t.Errorf("time %q: want RFC 3339 with a fraction of a second (%v, %v)", line.Time, ts, perr)
	}
}
