//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/harness"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// warnings collects the warnings the API server returns (kubectl prints them).
type warnings struct {
	mu   sync.Mutex
	text []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.text = append(w.text, text)
}

// warningClient is a client of the cluster whose warnings are collected, with its config.
func warningClient(t *testing.T) (kubernetes.Interface, *warnings, *rest.Config) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", env.hc.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	warned := &warnings{}
	cfg.WarningHandler = warned
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client, warned, cfg
}

func (w *warnings) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.text, "\n")
}

// mutateAdmissions is the webhook's count of pod admissions it handled.
func mutateAdmissions(ctx context.Context, t *testing.T) float64 {
	t.Helper()
	ms, err := env.webhook.Metrics(ctx)
	if err != nil {
		t.Fatalf("fetching metrics: %v", err)
	}
	return ms.Sum("custom_kube_scheduler_webhook_admissions_total", harness.Labels{"webhook": "mutate"})
}

// Scope (the chart's `scope` value, opt-in by default, as the suite registers): the API
// server sends only namespaces labelled custom-kube-scheduler-webhook.io/enabled=true or
// custom-kube-scheduler-webhook=enabled, each pod once. An unlabelled namespace's pods
// never reach the webhook (its admission count does not move), a strategy Deployment
// there is admitted with a warning naming the label, and spread says it is not enabled
// and exits 5. Registered with scope all, the unlabelled namespace is placed too.
func TestScopeOptIn(t *testing.T) {
	ctx := context.Background()
	// The default registration (opt-in), in case an earlier test left another.
	if err := env.register(ctx, "full"); err != nil {
		t.Fatal(err)
	}
	client, warned, _ := warningClient(t)

	off := newNamespaceLabelled(ctx, t, "e2e-scope-off", nil)
	on := newNamespace(ctx, t, "e2e-scope-on")
	original := newNamespaceLabelled(ctx, t, "e2e-scope-original", map[string]string{strategy.LabelNamespaceEnabledOriginal: "enabled"})
	both := newNamespaceLabelled(ctx, t, "e2e-scope-both", map[string]string{strategy.LabelNamespaceEnabled: "true", strategy.LabelNamespaceEnabledOriginal: "enabled"})

	before := mutateAdmissions(ctx, t)
	skipped := deployment(off, "unlabelled", seedStrategy, 3, true)
	if _, err := client.AppsV1().Deployments(off).Create(ctx, skipped, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating deployment %s/%s: %v", off, skipped.Name, err)
	}
	if w := warned.all(); !strings.Contains(w, "namespace "+off+" is not enabled") || !strings.Contains(w, strategy.LabelNamespaceEnabled+"=true") {
		t.Errorf("creating a strategy Deployment in an unlabelled namespace: want a warning naming the label, got %q", w)
	}
	assertNotMutated(t, settled(ctx, t, off, skipped.Name, 3), skipped.Spec.Template)
	if after := mutateAdmissions(ctx, t); after != before {
		t.Errorf("the webhook handled %v pod admissions while only the unlabelled namespace created pods, want 0", after-before)
	}
	out, stderr, code := cli(ctx, t, nil, "spread", "-n", off, "-o", "json")
	var r report.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 5 || len(r.Workloads) != 1 ||
		!strings.Contains(r.Workloads[0].NotEnabled, "kubectl label namespace "+off) || r.Workloads[0].Exact {
		t.Errorf("spread in the unlabelled namespace: exit %d (want 5), %v, want one workload not exact and not enabled:\n%s%s", code, err, out, stderr)
	}

	before = mutateAdmissions(ctx, t)
	placed := 0
	for _, ns := range []string{on, original, both} {
		d := deployment(ns, "labelled", seedStrategy, 3, true)
		createDeployment(ctx, t, d)
		assertExactSpread(ctx, t, seedStrategy, settled(ctx, t, ns, d.Name, 3))
		placed += 3
	}
	// Each pod once: a namespace with both labels matches one entry only.
	if got := mutateAdmissions(ctx, t) - before; got != float64(placed) {
		t.Errorf("the webhook handled %v pod admissions for %d pods of labelled namespaces, want one each", got, placed)
	}
	if _, _, code := cli(ctx, t, nil, "spread", "-n", both); code != 0 {
		t.Errorf("spread in a labelled namespace with exact workloads: exit %d, want 0", code)
	}
	if t.Failed() {
		return
	}

	// scope all: the unlabelled namespace is sent too.
	if err := env.registerWith(ctx, "full", env.webhook.Port, "WEBHOOK_SCOPE=all"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.register(context.Background(), "full"); err != nil {
			t.Errorf("restoring the default registration: %v", err)
		}
	})
	again := deployment(off, "unlabelled-scope-all", seedStrategy, 3, true)
	createDeployment(ctx, t, again)
	assertExactSpread(ctx, t, seedStrategy, settled(ctx, t, off, again.Name, 3))
}
