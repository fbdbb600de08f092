package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/plan"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

func TestPlanClusterBadInputExitsTwo(t *testing.T) {
	manifest := filepath.Join(t.TempDir(), "svc.yaml")
	if err := os.WriteFile(manifest, []byte("kind: Service\nmetadata: {name: x}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	prices := filepath.Join(t.TempDir(), "bad.prices")
	if err := os.WriteFile(prices, []byte("m5.large spot * cheap\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, []byte("apiVersion: custom-kube-scheduler-webhook.io/v1alpha1\nkind: PlacementPolicy\nmetadata: {name: p}\nspec: {strategy: a=1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	whatIf := func(more ...string) []string {
		return append([]string{"plan", "--cluster", "-n", "shop", "--kubeconfig", manifest, "-f", policyFile}, more...)
	}
	const s = "karpenter.sh/capacity-type=spot"
	cases := map[string]struct {
		args []string
		want string
	}{
		"both":             {[]string{"plan", "--strategy", s, "-f", manifest}, "not both"},
		"no workload":      {[]string{"plan", "-f", manifest}, "no Deployment, StatefulSet, Rollout, Job or CronJob"},
		"missing file":     {[]string{"plan", "-f", manifest + ".absent"}, "read manifest"},
		"range upside":     {[]string{"plan", "--cluster", "--strategy", s, "--replicas", "10", "--max-replicas", "5"}, "below --replicas"},
		"range too big":    {[]string{"plan", "--cluster", "--strategy", s, "--max-replicas", "2000000"}, "--max-replicas must be at most"},
		"replicas too big": {[]string{"plan", "--strategy", s, "--replicas", "2000000"}, "--replicas must be at most"},
		"bad requests":     {[]string{"plan", "--cluster", "--strategy", s, "--requests", "cpu"}, "want name=quantity"},
		"bad quantity":     {[]string{"plan", "--cluster", "--strategy", s, "--requests", "cpu=lots"}, "not a non-negative quantity"},
		"requests offline": {[]string{"plan", "--strategy", s, "--requests", "cpu=1"}, "need --cluster"},
		"type in cluster":  {[]string{"plan", "--cluster", "--strategy", s, "--cost", "--instance-type", "m5.large"}, "without --cluster"},
		"type no cost":     {[]string{"plan", "--strategy", s, "--instance-type", "m5.large"}, "need --cost"},
		"no pods per node": {[]string{"plan", "--strategy", s, "--cost", "--pods-per-node", "0"}, "at least 1"},
		"bad offline file": {[]string{"plan", "--strategy", s, "--cost", "--prices", prices}, "line 1: price"},
		"prices not cost":  {[]string{"plan", "--cluster", "--strategy", s, "--prices", prices}, "--prices needs --cost"},
		"bad price ttl":    {[]string{"plan", "--cluster", "--strategy", s, "--cost", "--price-ttl", "-1s"}, "--price-ttl"},
		"bad price file":   {[]string{"spread", "--cost", "--prices", prices, "--kubeconfig", manifest}, "line 1: price"},
		// The what-if of a policy reads each workload's live replicas and plans no cost.
		"what-if replicas": {whatIf("--replicas", "5"), "does not take --replicas"},
		"what-if cost":     {whatIf("--cost", "--max-replicas", "9"), "does not take --cost, --max-replicas"},
		"what-if strategy": {whatIf("--strategy", s), "does not take --strategy"},
		"what-if offline":  {[]string{"plan", "-f", policyFile}, "its what-if needs --cluster"},
	}
	for name, c := range cases {
		_, err := run(c.args...)
		if code := exitCode(err); code != 2 || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: exit %d (%v), want 2 and %q", name, code, err, c.want)
		}
	}
}

func TestParseRequests(t *testing.T) {
	req, err := parseRequests("cpu=500m, memory=1Gi")
	if err != nil {
		t.Fatal(err)
	}
	if c, m := req.Cpu().MilliValue(), req.Memory().Value(); c != 500 || m != 1<<30 {
		t.Fatalf("cpu %dm memory %d", c, m)
	}
	if _, err := parseRequests("cpu=-1"); err == nil {
		t.Fatal("a negative request was accepted")
	}
}

func TestWriteClusterPlan(t *testing.T) {
	r := plan.Result{
		Strategy: "a=1:b=2", Replicas: 10, MaxReplicas: 40, Requests: map[string]string{"cpu": "500m"},
		Terms: []plan.Term{
			{Term: 1, Labels: map[string]string{"a": "1"}, Target: 4, TargetMax: 10, Unlimited: true, Fits: true,
				NodePools: []plan.PoolRoom{{Name: "od", Headroom: karpenter.Headroom{Unlimited: true}}}},
			{Term: 2, Labels: map[string]string{"b": "2"}, Target: 6, TargetMax: 30, Room: 5, ShortAt: 9, Short: "needs 6 more pods; NodePool spot has room for 5 more pods",
				NodePools:        []plan.PoolRoom{{Name: "spot", Headroom: karpenter.Headroom{Pods: 5, Bound: "cpu", Left: "2500m"}}},
				UnavailableUntil: "2026-11-26T01:00:00Z", UnavailableReason: "NodeClaim failed"},
		},
		Unseen: []string{"EKS managed node groups (no region)"},
	}
	var out bytes.Buffer
	if err := writeClusterPlan(&out, r, "table"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"replicas 10 to 40", "4..10", "6..30", "unlimited", "NodePool/spot (5 pods, cpu 2500m left)",
		"term 2 unavailable until 2026-11-26T01:00:00Z: NodeClaim failed", "term 2 short at 9 replicas: needs 6 more pods", "plan does NOT fit", "EKS managed node groups"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan table lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := writeClusterPlan(&out, r, "json"); err != nil {
		t.Fatal(err)
	}
	var back plan.Result
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back.Terms[1].ShortAt != 9 || back.Terms[1].NodePools[0].Pods != 5 {
		t.Fatalf("json round trip %v: %+v", err, back)
	}
}

func TestWriteSpreadCost(t *testing.T) {
	wl := report.WorkloadReport{Terms: []report.TermReport{
		{Term: 1, Labels: map[string]string{"a": "1"}, Nodes: []report.NodeReport{{Name: "n1", Pods: 2}},
			Cost: &report.Cost{USDPerHour: 0.05, OnDemandUSDPerHour: 0.05, PricedPods: 2}},
		{Term: 2, Labels: map[string]string{"b": "2"}, Nodes: []report.NodeReport{{Name: "n2", Pods: 3}},
			Cost: &report.Cost{PricedPods: 0, Unpriced: []string{"node n2: x9.huge: no price"}}},
	}, Cost: &report.Cost{USDPerHour: 0.05, OnDemandUSDPerHour: 0.08, SavingUSDPerHour: 0.03, SavingPercent: 37.5, PricedPods: 2,
		Unpriced: []string{"node n2: x9.huge: no price"}}}
	var out bytes.Buffer
	if err := writeSpreadCost(&out, wl); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	if len(lines) < 5 || !strings.Contains(lines[1], "$0.0500") || !strings.HasSuffix(strings.Join(strings.Fields(lines[2]), " "), "0 of 3 - - -") ||
		!strings.Contains(lines[3], "2 of 5") || !strings.Contains(lines[3], "$0.0300 (37.5%)") || !strings.Contains(lines[4], "not priced: node n2") {
		t.Fatalf("cost table:\n%s", out.String())
	}
	out.Reset()
	if err := writeSpreadCost(&out, report.WorkloadReport{}); err != nil || out.Len() != 0 {
		t.Fatalf("a workload without cost wrote %q (%v)", out.String(), err)
	}
}

// Without --cluster, -f plans the manifest's strategy at its replica count.
func TestPlanFromManifest(t *testing.T) {
	manifest := filepath.Join(t.TempDir(), "deploy.yaml")
	doc := `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 12
  template:
    metadata:
      annotations: {CustomPodScheduleStrategy: "karpenter.sh/capacity-type=on-demand,base=2:karpenter.sh/capacity-type=spot,weight=3"}
    spec: {containers: [{name: c, image: x}]}
`
	if err := os.WriteFile(manifest, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run("plan", "-f", manifest, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var d planDoc
	if err := json.Unmarshal([]byte(out), &d); err != nil || d.Replicas != 12 || len(d.Terms) != 2 || d.Terms[0].Count+d.Terms[1].Count != 12 || d.Terms[0].Count < 2 {
		t.Fatalf("plan -f: %v %+v", err, d)
	}
	// --replicas overrides the manifest's.
	if out, err = run("plan", "-f", manifest, "--replicas", "3", "-o", "json"); err != nil || json.Unmarshal([]byte(out), &d) != nil || d.Replicas != 3 {
		t.Fatalf("plan -f --replicas 3: %v %+v", err, d)
	}
}

// plan --cluster warns when the workload's namespace is not sent to the webhook.
func TestPlanWarnsNotEnabled(t *testing.T) {
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "cksw"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: clusterview.PodWebhookName, NamespaceSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{strategy.LabelNamespaceEnabled: "true"}}}},
	}
	off := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "off"}}
	on := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "on", Labels: map[string]string{strategy.LabelNamespaceEnabled: "true"}}}
	kc := kubeClients{client: fake.NewClientset(cfg, off, on)}
	var b strings.Builder
	msg, err := warnNotEnabled(context.Background(), &b, kc, "off", plan.Options{Kind: "Deployment", Name: "web"})
	if err != nil || msg == "" {
		t.Fatalf("not enabled: want the message returned (runCluster exits 3 on it), got %q, %v", msg, err)
	}
	if !strings.Contains(b.String(), "warning: namespace off is not enabled") || !strings.Contains(b.String(), "Deployment off/web") {
		t.Errorf("want a warning naming the namespace and the workload, got %q", b.String())
	}
	b.Reset()
	if msg, err := warnNotEnabled(context.Background(), &b, kc, "on", plan.Options{}); err != nil || b.Len() != 0 || msg != "" {
		t.Errorf("enabled namespace: want no warning, got %q (%v)", b.String(), err)
	}
}

// plan --cost --prices FILE without --cluster prices each term on the instance type and
// capacity type its labels (or --instance-type) name, offline; a term whose capacity
// type cannot be told is listed as not priced, with the reason.
func TestPlanOfflineCost(t *testing.T) {
	prices := filepath.Join(t.TempDir(), "prices")
	if err := os.WriteFile(prices, []byte("m5.large on-demand * 0.1\nm5.large spot * 0.04\nc5.large on-demand * 0.09\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const s = "karpenter.sh/capacity-type=on-demand,base=2:karpenter.sh/capacity-type=spot,weight=1:node.kubernetes.io/instance-type=c5.large,weight=1"
	out, err := run("plan", "--replicas", "6", "--strategy", s, "--cost", "--prices", prices, "--instance-type", "m5.large", "--pods-per-node", "2")
	if err != nil {
		t.Fatalf("plan --cost offline: %v\n%s", err, out)
	}
	for _, want := range []string{"cost at 6 replicas (each pod 1/2 of a node (--pods-per-node)):", "m5.large spot", "term 3 not priced: no capacity type"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan --cost offline lacks %q:\n%s", want, out)
		}
	}
	out, err = run("plan", "--replicas", "6", "--strategy", s, "--cost", "--prices", prices, "--instance-type", "m5.large", "--pods-per-node", "2", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var doc planDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	// 6 replicas: 2 on-demand + 2 spot + 2 unpriced; each pod half a node.
	if len(doc.Terms) != 3 || doc.Terms[0].Cost.MedianUSDPerHour != 0.1 || doc.Terms[1].Cost.MedianUSDPerHour != 0.04 ||
		doc.Terms[1].Cost.OnDemandMedianUSDPerHour != 0.1 || doc.Cost == nil || doc.Cost.SavingUSDPerHour != 0.06 || doc.Cost.SavingPercent != 30 {
		t.Fatalf("plan -o json cost:\n%s", out)
	}
	// Without --instance-type, terms selecting no instance type are unpriced too.
	out, err = run("plan", "--replicas", "2", "--strategy", "karpenter.sh/capacity-type=spot", "--cost", "--prices", prices)
	if err != nil || !strings.Contains(out, "no instance type") || !strings.Contains(out, "--instance-type") {
		t.Fatalf("no instance type: %v\n%s", err, out)
	}
}
