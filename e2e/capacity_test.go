//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"
)

// kubectl runs kubectl against the e2e cluster with stdin, returning stdout, stderr
// and the error of the run.
func kubectl(ctx context.Context, stdin string, args ...string) (string, string, error) {
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", env.hc.Kubeconfig()}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// applyNodePool creates a NodePool for one test and deletes it afterwards.
func applyNodePool(ctx context.Context, t *testing.T, manifest string) {
	t.Helper()
	if _, stderr, err := kubectl(ctx, manifest, "apply", "-f", "-"); err != nil {
		t.Fatalf("applying NodePool: %v\n%s", err, stderr)
	}
	t.Cleanup(func() {
		if _, stderr, err := kubectl(context.Background(), manifest, "delete", "--wait=false", "-f", "-"); err != nil {
			t.Logf("deleting NodePool: %v\n%s", err, stderr)
		}
	})
}

func manifest(t *testing.T, obj any) string {
	t.Helper()
	b, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// applyDryRun server-side dry-runs a Deployment with `kubectl apply`, as a user would,
// and returns what kubectl printed on stderr (warnings, the rejection).
func applyDryRun(ctx context.Context, t *testing.T, ns, name, strat string) (string, error) {
	t.Helper()
	d := deployment(ns, name, strat, 1, false)
	d.APIVersion, d.Kind = "apps/v1", "Deployment"
	_, stderr, err := kubectl(ctx, manifest(t, d), "apply", "--dry-run=server", "-f", "-")
	return stderr, err
}

// waitServed waits until the webhook's NodePool cache serves every term of strat:
// `kubectl apply --dry-run=server` no longer warns that a term is served by nothing.
func waitServed(ctx context.Context, t *testing.T, ns, strat string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		stderr, err := applyDryRun(ctx, t, ns, "served-probe", strat)
		last = stderr
		return err == nil && !strings.Contains(stderr, "served by no"), nil
	})
	if err != nil {
		t.Fatalf("the webhook never saw capacity serving %q; last kubectl output:\n%s", strat, last)
	}
}

const taintedPool = `apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: e2e-tainted-spot
spec:
  template:
    metadata:
      labels: {pool: e2e-tainted}
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      taints:
        - {key: capacity, value: spot, effect: NoSchedule}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
        - {key: node.kubernetes.io/instance-type, operator: In, values: [s-4x-amd64-linux]}
  disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 1m}
`

// A NodePool tainted capacity=spot:NoSchedule: the strategy's pods get the toleration
// and run on nodes Karpenter makes for that pool, while a pod that selects the same pool
// without the webhook (and so without the toleration) stays Pending.
func TestTaintedNodePoolGetsTolerations(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "e2e-tainted")
	applyNodePool(ctx, t, taintedPool)
	const strat = "pool=e2e-tainted"
	waitServed(ctx, t, ns, strat)

	// The control: the same nodeSelector, no strategy, so no toleration.
	control := deployment(ns, "control", strat, 1, false)
	control.Annotations = nil
	control.Spec.Template.Spec.NodeSelector = map[string]string{"pool": "e2e-tainted"}
	createDeployment(ctx, t, control)

	createDeployment(ctx, t, deployment(ns, "placed", strat, 3, true))
	pods := settled(ctx, t, ns, "placed", 3)
	all := nodes(ctx, t)
	for _, p := range pods {
		if pool := all[p.Spec.NodeName].Labels[labelNodePool]; pool != "e2e-tainted-spot" {
			t.Errorf("pod %s runs on node %s of NodePool %q, want e2e-tainted-spot", p.Name, p.Spec.NodeName, pool)
		}
		if !hasToleration(p.Spec.Tolerations, corev1.Toleration{Key: "capacity", Operator: corev1.TolerationOpEqual, Value: "spot", Effect: corev1.TaintEffectNoSchedule}) {
			t.Errorf("pod %s lacks the capacity=spot:NoSchedule toleration: %+v", p.Name, p.Spec.Tolerations)
		}
	}

	// By now a tainted node of the pool exists; the scheduler finds the control pod
	// unschedulable (it does not tolerate the taint) and it stays Pending.
	var cp corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := env.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=control"})
		if err != nil || len(list.Items) != 1 {
			return false, nil
		}
		cp = list.Items[0]
		for _, c := range cp.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable &&
				strings.Contains(c.Message, "untolerated taint {capacity: spot}") {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the control pod was never found unschedulable for the taint: %+v", cp.Status)
	}
	if cp.Spec.NodeName != "" || cp.Status.Phase != corev1.PodPending {
		t.Fatalf("the control pod without toleration was scheduled to %q (%s)", cp.Spec.NodeName, cp.Status.Phase)
	}
	t.Logf("control pod %s: Pending, conditions %+v", cp.Name, cp.Status.Conditions)
}

func hasToleration(list []corev1.Toleration, want corev1.Toleration) bool {
	for _, t := range list {
		if t.Key == want.Key && t.Operator == want.Operator && t.Value == want.Value && t.Effect == want.Effect {
			return true
		}
	}
	return false
}

const computePool = `apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: e2e-compute
spec:
  template:
    metadata:
      labels: {tier: e2e-compute}
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: karpenter.kwok.sh/instance-family, operator: In, values: [c]}
        - {key: karpenter.kwok.sh/instance-cpu, operator: Gt, values: ["15"]}
        - {key: karpenter.kwok.sh/instance-cpu, operator: Lte, values: ["32"]}
  disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 1m}
`

// A NodePool bounded by Gt and Lte on instance-cpu serves a term asking 32 CPUs, not
// one asking 8 (below Gt 15) or 64 (above Lte 32): `kubectl apply` warns about exactly
// those two terms, and the served term's pods run on 32-CPU nodes of that pool.
func TestNumericRequirementsAndApplyTimeWarnings(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "e2e-compute")
	applyNodePool(ctx, t, computePool)
	const served = "tier=e2e-compute,karpenter.kwok.sh/instance-cpu=32"
	waitServed(ctx, t, ns, served)

	mixed := served + ",weight=2:tier=e2e-compute,karpenter.kwok.sh/instance-cpu=8:tier=e2e-compute,karpenter.kwok.sh/instance-cpu=64"
	stderr, err := applyDryRun(ctx, t, ns, "mixed", mixed)
	if err != nil {
		t.Fatalf("a strategy with unserved terms must be admitted with warnings, got %v\n%s", err, stderr)
	}
	for term, want := range map[int]bool{1: false, 2: true, 3: true} {
		if got := strings.Contains(stderr, fmt.Sprintf("term %d (", term)) && strings.Contains(stderr, "served by no NodePool"); got != want {
			t.Errorf("warning about term %d: %v, want %v; kubectl printed:\n%s", term, got, want, stderr)
		}
	}
	if !strings.Contains(stderr, "Warning:") {
		t.Errorf("kubectl printed no warning:\n%s", stderr)
	}

	createDeployment(ctx, t, deployment(ns, "compute", served, 2, false))
	pods := settled(ctx, t, ns, "compute", 2)
	all := nodes(ctx, t)
	for _, p := range pods {
		n := all[p.Spec.NodeName]
		if n.Labels[labelNodePool] != "e2e-compute" || n.Labels["karpenter.kwok.sh/instance-cpu"] != "32" {
			t.Errorf("pod %s on node %s (pool %q, %s CPUs), want pool e2e-compute with 32 CPUs",
				p.Name, n.Name, n.Labels[labelNodePool], n.Labels["karpenter.kwok.sh/instance-cpu"])
		}
	}
}

// An invalid strategy makes `kubectl apply` fail with the parser's message, and so does
// a label key no capacity carries that is one letter off a key that exists (a likely
// typo), naming that key; a key far from any is a warning; a Job carrying an invalid
// strategy is applied (a batch run is never refused) with a warning that its pods will
// not be placed.
func TestApplyTimeValidation(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "e2e-validate")

	stderr, err := applyDryRun(ctx, t, ns, "broken", "karpenter.sh/capacity-type=on-demand,base=1:karpenter.sh/capacity-type=spot,weight=x")
	if err == nil {
		t.Fatalf("kubectl apply of an invalid strategy succeeded:\n%s", stderr)
	}
	want := `term 2 ("karpenter.sh/capacity-type=spot,weight=x"): weight "x" is not a non-negative integer`
	if !strings.Contains(stderr, want) {
		t.Fatalf("kubectl apply failed without the parser's message %q:\n%s", want, stderr)
	}

	stderr, err = applyDryRun(ctx, t, ns, "typo", "karpenter.sh/capacity-type=on-demand,base=1:karpenter.sh/capacity-typo=spot")
	if err == nil || !strings.Contains(stderr, `term 2 (karpenter.sh/capacity-typo=spot)`) || !strings.Contains(stderr, `did you mean "karpenter.sh/capacity-type"?`) {
		t.Fatalf("a typo'd label key must be refused naming the key that exists: %v\n%s", err, stderr)
	}
	stderr, err = applyDryRun(ctx, t, ns, "unknown", "karpenter.sh/capacity-type=on-demand,base=1:example.com/accelerator=gpu")
	if err != nil || !strings.Contains(stderr, `term 2 (example.com/accelerator=gpu)`) || !strings.Contains(stderr, "served by no NodePool") {
		t.Fatalf("a label key far from any must warn, not reject: %v\n%s", err, stderr)
	}

	// A Job carrying an invalid strategy is applied, with a warning that says its pods
	// will not be placed.
	job := fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata:
  name: nightly
  namespace: %s
  annotations: {CustomPodScheduleStrategy: "karpenter.sh/capacity-type=spot,weight=x"}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: registry.k8s.io/pause:3.10}]
`, ns)
	_, stderr, err = kubectl(ctx, job, "apply", "--dry-run=server", "-f", "-")
	if err != nil {
		t.Fatalf("a Job with an invalid strategy must be applied (with a warning): %v\n%s", err, stderr)
	}
	if want := "CustomPodScheduleStrategy on Job " + ns + "/nightly is invalid, its pods will not be placed: term 1"; !strings.Contains(stderr, want) {
		t.Fatalf("kubectl apply of a Job with an invalid strategy printed no warning %q:\n%s", want, stderr)
	}
}
