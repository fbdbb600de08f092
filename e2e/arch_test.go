//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/harness"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/testregistry"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// archPool offers both architectures (kwok has amd64 and arm64 instance types), under
// a label and a taint of its own so that no other test's pods land there.
const archPool = `apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: e2e-arch-both
spec:
  template:
    metadata:
      labels: {archtest: mixed}
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      taints:
        - {key: archtest, value: mixed, effect: NoSchedule}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: kubernetes.io/os, operator: In, values: [linux]}
        - {key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}
        - {key: karpenter.kwok.sh/instance-cpu, operator: In, values: ["2", "4"]}
  disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 1m}
`

const (
	archOpen   = "archtest=mixed"
	archPinned = "archtest=mixed,kubernetes.io/arch=arm64"
)

// archWebhook starts a webhook process with image lookups on, reaching the test's
// loopback registries (comma-separated) over plain HTTP, with more settings, and
// registers it for the test.
func archWebhook(ctx context.Context, t *testing.T, registries string, settings ...string) *harness.Serve {
	t.Helper()
	p := env.newWebhook("webhook-e2e-arch", env.webhook.Port+20, append([]string{"IMAGE_ARCHITECTURES=on", "IMAGE_INSECURE_REGISTRIES=" + registries}, settings...)...)
	if err := p.Start(ctx); err != nil {
		t.Fatalf("starting the webhook with image lookups: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("stopping webhook-e2e-arch: %v", err)
		}
	})
	if err := env.registerAt(ctx, "full", p.Port); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.register(context.Background(), "full"); err != nil {
			t.Errorf("registering the suite's webhook again: %v", err)
		}
	})
	return p
}

// archDecisions scrapes the process's architecture decisions of outcome ("": all).
func archDecisions(ctx context.Context, t *testing.T, p *harness.Serve, outcome string) float64 {
	t.Helper()
	ms, err := p.Metrics(ctx)
	if err != nil {
		t.Fatalf("fetching metrics: %v", err)
	}
	var sel harness.Labels
	if outcome != "" {
		sel = harness.Labels{"outcome": outcome}
	}
	return ms.Sum("custom_kube_scheduler_webhook_architecture_decisions_total", sel)
}

// archDeployment is a Deployment of image with the strategy on its template ("": none).
func archDeployment(ns, name, strat, image string, replicas int) *appsv1.Deployment {
	d := deployment(ns, name, strat, replicas, true)
	if strat == "" {
		d.Spec.Template.Annotations = nil
	}
	d.Spec.Template.Spec.Containers[0].Image = image
	return d
}

// archRequirement is the kubernetes.io/arch values the pod's required node affinity
// asks for in each of its terms (nil: none).
func archRequirement(p corev1.Pod) []string {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	var out []string
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, r := range term.MatchExpressions {
			if r.Key == corev1.LabelArchStable {
				out = append(out, strings.Join(r.Values, ","))
			}
		}
	}
	return out
}

// seatedPods waits until the Deployment has n pods carrying a seat, and returns them.
func seatedPods(ctx context.Context, t *testing.T, ns, name string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, time.Second, settleTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := env.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{"app": name}.String()})
		if err != nil {
			return false, nil
		}
		pods = pods[:0]
		for _, p := range list.Items {
			if _, ok := p.Annotations[strategy.AnnotationSeat]; ok {
				pods = append(pods, p)
			}
		}
		return len(pods) == n, nil
	})
	if err != nil {
		t.Fatalf("%s/%s: %d pods with a seat, want %d: %v", ns, name, len(pods), n, err)
	}
	return pods
}

// Architecture-aware placement on a NodePool offering amd64 and arm64: pods of an
// amd64-only image get a required affinity on amd64 and never run on arm64; pods of a
// multi-arch image get none. A term pinned to arm64 for the amd64-only image is refused
// at apply; reached through a namespace default it is placed on its seat with an Event,
// a metric and a not-exact spread. With the registry stopped, pods of an image never
// looked up are still admitted and placed, without the requirement.
func TestImageArchitectures(t *testing.T) {
	ctx := context.Background()
	reg := testregistry.Start(t, testregistry.Options{})
	multi, amd64Only, late := reg.Host+"/e2e/multi:1", reg.Host+"/e2e/amd64-only:1", reg.Host+"/e2e/late:1"
	testregistry.PushIndex(t, multi, testregistry.MultiArchIndex(t, "amd64", "arm64"))
	testregistry.PushImage(t, amd64Only, testregistry.PlatformImage(t, "amd64"))
	testregistry.PushImage(t, late, testregistry.PlatformImage(t, "amd64"))
	applyNodePool(ctx, t, archPool)
	ns := newNamespace(ctx, t, "e2e-arch")
	waitServed(ctx, t, ns, archOpen)
	p := archWebhook(ctx, t, reg.Host)

	createDeployment(ctx, t, archDeployment(ns, "amd64-only", archOpen, amd64Only, 4))
	createDeployment(ctx, t, archDeployment(ns, "multi", archOpen, multi, 4))
	all := func() map[string]corev1.Node { return nodes(ctx, t) }
	for _, p := range settled(ctx, t, ns, "amd64-only", 4) {
		if got := archRequirement(p); !slices.Equal(got, []string{"amd64"}) {
			t.Errorf("pod %s of the amd64-only image: arch requirement %v, want [amd64]", p.Name, got)
		}
		if arch := all()[p.Spec.NodeName].Labels[corev1.LabelArchStable]; arch != "amd64" {
			t.Errorf("pod %s of the amd64-only image runs on node %s of arch %q", p.Name, p.Spec.NodeName, arch)
		}
	}
	var arches []string
	for _, p := range settled(ctx, t, ns, "multi", 4) {
		if got := archRequirement(p); got != nil {
			t.Errorf("pod %s of the multi-arch image: arch requirement %v, want none", p.Name, got)
		}
		arches = append(arches, all()[p.Spec.NodeName].Labels[corev1.LabelArchStable])
	}
	t.Logf("pods of the multi-arch image run on nodes of arch %v", arches)
	if n := archDecisions(ctx, t, p, ""); n < 8 {
		t.Errorf("architecture decisions counted %v, want at least the 8 placements", n)
	}

	// At apply: a term pinned to arm64 for the amd64-only image is refused (reject mode).
	d := archDeployment(ns, "pinned-refused", archPinned, amd64Only, 1)
	d.APIVersion, d.Kind = "apps/v1", "Deployment"
	if _, stderr, err := kubectl(ctx, manifest(t, d), "apply", "-f", "-"); err == nil || !strings.Contains(stderr, "cannot run its pods' images: it pins kubernetes.io/arch=arm64, and they support only amd64") {
		t.Errorf("applying a term pinned to arm64 for an amd64-only image: %v\n%s", err, stderr)
	}

	// plan --cluster reads the manifest's images and names the term; a multi-arch
	// image on the same term passes.
	file := filepath.Join(t.TempDir(), "pinned.yaml")
	if err := os.WriteFile(file, []byte(manifest(t, d)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := cli(ctx, t, nil, "plan", "--cluster", "-f", file, "--image-insecure-registries", reg.Host)
	if code != 3 || !strings.Contains(stderr, "term 1 (archtest=mixed,kubernetes.io/arch=arm64) of Deployment e2e-arch/pinned-refused cannot run its pods' images") {
		t.Errorf("plan --cluster of the pinned term: exit %d\n%s", code, stderr)
	}
	d.Spec.Template.Spec.Containers[0].Image = multi
	if err := os.WriteFile(file, []byte(manifest(t, d)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, _ := cli(ctx, t, nil, "plan", "--cluster", "-f", file, "--image-insecure-registries", reg.Host); strings.Contains(stderr, "cannot run") || strings.Contains(stderr, "not checked") {
		t.Errorf("plan --cluster of the pinned term with a multi-arch image:\n%s", stderr)
	}

	// At admission, through a namespace default (a default names no image to check at
	// apply): placed on its seat, said so in an Event, a metric, the pod and spread.
	pinnedNS := newNamespace(ctx, t, "e2e-arch-pinned")
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, strategy.AnnotationStrategy, archPinned)
	if _, err := env.client.CoreV1().Namespaces().Patch(ctx, pinnedNS, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	createDeployment(ctx, t, archDeployment(pinnedNS, "pinned", "", amd64Only, 2))
	for _, pod := range seatedPods(ctx, t, pinnedNS, "pinned", 2) {
		if pod.Annotations[strategy.AnnotationCannotRun] == "" || pod.Spec.NodeSelector[corev1.LabelArchStable] != "arm64" {
			t.Errorf("pod %s on the pinned term: cannot-run %q, nodeSelector %v", pod.Name, pod.Annotations[strategy.AnnotationCannotRun], pod.Spec.NodeSelector)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		return len(eventsWith(ctx, t, pinnedNS, "pinned", "ImageArchitectureMismatch")) > 0, nil
	})
	if err != nil {
		t.Errorf("no ImageArchitectureMismatch Event on the Deployment: %v", err)
	}
	if n := archDecisions(ctx, t, p, "cannot_run"); n < 2 {
		t.Errorf("cannot_run decisions %v, want 2", n)
	}
	sp := spreadJSON(ctx, t, pinnedNS, "pinned")
	b, _ := json.Marshal(sp)
	if !strings.Contains(string(b), `"cannotRun":2`) || !strings.Contains(string(b), `"exact":false`) {
		t.Errorf("spread of the pinned Deployment: %s", b)
	}

	// The registry stops: pods of an image never looked up are admitted and placed
	// within the admission deadline, without an architecture requirement.
	reg.Stop()
	before := archDecisions(ctx, t, p, "unknown")
	createDeployment(ctx, t, archDeployment(ns, "late", archOpen, late, 2))
	for _, pod := range seatedPods(ctx, t, ns, "late", 2) {
		if got := archRequirement(pod); got != nil {
			t.Errorf("pod %s admitted while the registry is down: arch requirement %v, want none", pod.Name, got)
		}
	}
	if n := archDecisions(ctx, t, p, "unknown"); n-before < 2 {
		t.Errorf("unknown decisions rose by %v, want 2", n-before)
	}
}
