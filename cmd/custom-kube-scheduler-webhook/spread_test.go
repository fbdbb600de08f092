package main

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/doccheck"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// The text form says the verdict, the scheduler's reason for pending pods and the
// fallback state of a term.
func TestWriteSpreadText(t *testing.T) {
	r := report.Report{Workloads: []report.WorkloadReport{{
		Kind: "Deployment", Namespace: "demo", Name: "web", Replicas: 4, Revision: "web-new", OtherRevisions: 1,
		Terms: []report.TermReport{
			{Term: 1, Labels: map[string]string{"capacity": "on-demand"}, Target: 1, Expected: 3, Placed: 3, Running: 3,
				UnavailableUntil: "2026-11-23T01:00:00Z", UnavailableReason: "2 pods unschedulable for 90s", ServedBy: []string{"NodePool/on-demand"},
				Nodes: []report.NodeReport{{Name: "n1", CapacityType: "on-demand", Pods: 3}, {Name: "r1", CapacityType: "reserved", Pods: 1}}, ReservedPods: 1},
			{Term: 2, Labels: map[string]string{"capacity": "spot"}, Target: 3, Expected: 1, Placed: 1, Pending: 1, FallbackPods: 2,
				PendingReasons: []string{"Unschedulable: 0/2 nodes are available"}, ServedBy: []string{}, Nodes: []report.NodeReport{}},
		},
	}}}
	var out bytes.Buffer
	if err := writeSpread(&out, r, "text"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"spread NOT exact", "pods of older revisions 1", "pending: Unschedulable: 0/2 nodes are available",
		"unavailable until 2026-11-23T01:00:00Z", "2 of its pods on fallback", "NodePool/on-demand", "n1", "r1(reserved)x1", "1 of its pods on reserved capacity"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, out.String())
		}
	}
	r.Workloads[0].Exact = true
	out.Reset()
	if err := writeSpread(&out, r, "text"); err != nil || !strings.Contains(out.String(), "spread exact") {
		t.Errorf("exact report (%v):\n%s", err, out.String())
	}
}

// What the report could not read is said after the workloads, also when there are none.
func TestWriteSpreadUnseen(t *testing.T) {
	for _, r := range []report.Report{
		{Unseen: []string{"nodes (not allowed to list them): x"}},
		{Workloads: []report.WorkloadReport{{Kind: "Deployment", Namespace: "demo", Name: "web"}}, Unseen: []string{"nodes (not allowed to list them): x"}},
	} {
		var out bytes.Buffer
		if err := writeSpread(&out, r, "table"); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "Not seen, so not in this report:\n  - nodes (not allowed to list them): x") {
			t.Errorf("no unseen section:\n%s", out.String())
		}
	}
}

func TestWriteSpreadYAML(t *testing.T) {
	r := report.Report{Workloads: []report.WorkloadReport{{Kind: "Deployment", Namespace: "demo", Name: "web", Replicas: 2, Exact: true}}}
	var out bytes.Buffer
	if err := writeSpread(&out, r, "yaml"); err != nil {
		t.Fatal(err)
	}
	var back report.Report
	if err := yaml.Unmarshal(out.Bytes(), &back); err != nil || len(back.Workloads) != 1 || back.Workloads[0].Name != "web" || !strings.Contains(out.String(), "namespace: demo") {
		t.Fatalf("spread -o yaml (%v):\n%s", err, out.String())
	}
}

func TestParseWorkloadArg(t *testing.T) {
	for arg, want := range map[string]string{"deploy/web": "Deployment/web", "sts/db": "StatefulSet/db", "rs/x": "ReplicaSet/x", "web": "/web"} {
		kind, name, err := parseWorkloadArg(arg)
		if err != nil || kind+"/"+name != want {
			t.Errorf("%s: %s/%s %v", arg, kind, name, err)
		}
	}
	if _, _, err := parseWorkloadArg("cronjob/x"); err == nil {
		t.Error("cronjob/x accepted")
	}
}

// Named kubectl-spread, the binary is the spread report alone, as `kubectl spread`.
func TestKubectlPluginName(t *testing.T) {
	for _, argv0 := range []string{"/usr/local/bin/kubectl-spread", "kubectl-spread.exe"} {
		cmd := commandFor(argv0)
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs([]string{"--help"})
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "kubectl spread [deployment/NAME") || !strings.Contains(out.String(), "kubectl spread -n demo") || !strings.Contains(out.String(), "--namespace") {
			t.Errorf("%s --help:\n%s", argv0, out.String())
		}
		cmd = commandFor(argv0)
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs([]string{"-o", "xml"})
		if err := cmd.Execute(); exitCode(err) != 2 {
			t.Errorf("%s -o xml: %v, want exit status 2", argv0, err)
		}
	}
	if cmd := commandFor("/usr/bin/custom-kube-scheduler-webhook"); cmd.Name() != "custom-kube-scheduler-webhook" {
		t.Errorf("under its own name the binary runs %q, want the whole CLI", cmd.Name())
	}
}

// spread's exit status gates CI: 0 when every workload is exact, 3 naming those that
// are not (including a namespace that is not enabled).
func TestSpreadVerdict(t *testing.T) {
	exact := report.WorkloadReport{Kind: "Deployment", Namespace: "a", Name: "web", Exact: true}
	off := report.WorkloadReport{Kind: "Deployment", Namespace: "b", Name: "api", NotEnabled: "namespace b is not enabled"}
	if err := spreadVerdict(report.Report{Workloads: []report.WorkloadReport{exact}}); err != nil {
		t.Errorf("all exact: %v", err)
	}
	if err := spreadVerdict(report.Report{}); err != nil {
		t.Errorf("no workloads: %v", err)
	}
	err := spreadVerdict(report.Report{Workloads: []report.WorkloadReport{exact, off}})
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 3 || !strings.Contains(err.Error(), "Deployment b/api") || strings.Contains(err.Error(), "a/web") {
		t.Errorf("one not exact: want exit 3 naming it, got %v", err)
	}
	var b strings.Builder
	if err := writeSpread(&b, report.Report{Workloads: []report.WorkloadReport{off}}, "table"); err != nil || !strings.Contains(b.String(), "not enabled: namespace b is not enabled") {
		t.Errorf("the table says the namespace is not enabled: %v\n%s", err, b.String())
	}
}

// docs/messages.md's exit statuses are spread's: each state's row gives exitFor's code.
func TestExitStatusCatalogue(t *testing.T) {
	rows, err := doccheck.Table("../../docs/messages.md", "States and exit statuses")
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]bool{}
	for _, r := range rows {
		if r[1] == "" {
			continue
		}
		states[r[1]] = true
		if got := strconv.Itoa(exitFor(r[1])); got != r[0] {
			t.Errorf("docs/messages.md: state %s exits %s, the code says %s", r[1], r[0], got)
		}
	}
	for _, s := range []string{string(strategy.StateExact), string(strategy.StateFallback), string(strategy.StateOffTarget), report.StateNotEnabled, report.StateInvalid} {
		if !states[s] {
			t.Errorf("docs/messages.md lists no state %s", s)
		}
	}
}
