//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// rollouts is Argo Rollouts' Rollout, served from its real CRD (scripts/localcluster/up.sh
// applies it from the argo-rollouts Go module, ARGO_ROLLOUTS_VERSION).
var rollouts = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "rollouts"}

// TestRolloutReplicaSetsSplit: ReplicaSets an Argo Rollout controls are split by the
// Rollout's own annotation, and an un-annotated Rollout's by a PlacementPolicy for kind
// Rollout (a policy for Deployments only, of higher priority, is passed over). On the
// way: a Rollout with an invalid strategy is refused at apply, and `spread rollout/NAME`
// reports a Rollout before it has a ReplicaSet.
//
// The cluster serves the real Rollout CRD but runs no Argo Rollouts controller (its
// build does not fit the suite's budget): the test creates the Rollout objects and, as
// the controller would, a ReplicaSet each controls (a controller owner reference with
// the Rollout's UID); the real ReplicaSet controller creates their pods, which the
// webhook admits.
func TestRolloutReplicaSetsSplit(t *testing.T) {
	ctx := context.Background()
	dyn := dynamicClient(t)
	if _, err := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).
		Get(ctx, "rollouts.argoproj.io", metav1.GetOptions{}); err != nil {
		t.Fatalf("the Rollout CRD is not installed (scripts/localcluster/up.sh applies it before the webhook starts): %v", err)
	}
	ns := policyNamespace(ctx, t, "e2e-argo-rollouts", nil, "")
	const replicas = 10

	// 0. An invalid strategy on a Rollout is refused at apply, as on a Deployment.
	broken := rolloutObject(t, ns, "broken", nil, map[string]string{strategy.AnnotationStrategy: "karpenter.sh/capacity-type=spot,weight=x"}, 1)
	_, err := dyn.Resource(rollouts).Namespace(ns).Create(ctx, broken, metav1.CreateOptions{})
	if want := `CustomPodScheduleStrategy on Rollout ` + ns + `/broken is invalid: term 1 ("karpenter.sh/capacity-type=spot,weight=x")`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("creating a Rollout with an invalid strategy: %v, want refused with %q", err, want)
	}

	// 1. The Rollout's annotation. Before its ReplicaSet exists, spread reports it with
	// its strategy, 0 pods and why.
	annotated := createRollout(ctx, t, dyn, ns, "canary", nil, map[string]string{strategy.AnnotationStrategy: seedStrategy}, replicas)
	early := spreadRolloutJSON(ctx, t, ns, "canary")
	if why, _ := early["noRevision"].(string); !strings.Contains(why, "no ReplicaSet yet") || early["strategy"] != seedStrategy || early["exact"] == true {
		t.Errorf("spread rollout/canary before its ReplicaSet: %v; want its strategy, not exact, no ReplicaSet yet", early)
	}
	createRolloutReplicaSet(ctx, t, annotated, replicas)

	// 2. A policy for kind Rollout; one for Deployments only, of higher priority, must not
	// apply.
	if err := createPolicy(ctx, t, dyn, ns, "rollouts", map[string]any{
		"strategy": capacityStrategy, "kinds": []any{"Rollout"},
		"selector": map[string]any{"matchLabels": map[string]any{"team": "web"}},
	}); err != nil {
		t.Fatalf("creating the PlacementPolicy for Rollouts: %v", err)
	}
	if err := createPolicy(ctx, t, dyn, ns, "deployments-only", map[string]any{
		"strategy": seedStrategy, "kinds": []any{"Deployment"}, "priority": int64(10),
	}); err != nil {
		t.Fatalf("creating the PlacementPolicy for Deployments: %v", err)
	}
	plain := createRollout(ctx, t, dyn, ns, "plain", map[string]string{"team": "web"}, nil, replicas)
	createRolloutReplicaSet(ctx, t, plain, replicas)

	got := assertExactSpread(ctx, t, seedStrategy, settledReplicaSet(ctx, t, ns, "canary", replicas))
	if want := []int{1, 4, 5}; !slices.Equal(got, want) {
		t.Errorf("Rollout canary (annotation): spread %v, want %v", got, want)
	}
	t.Logf("Rollout %s/canary (annotation, %s): per-term %v", ns, seedStrategy, got)
	got = assertExactSpread(ctx, t, capacityStrategy, settledReplicaSet(ctx, t, ns, "plain", replicas))
	if want := []int{4, 6}; !slices.Equal(got, want) {
		t.Errorf("Rollout plain (PlacementPolicy for kind Rollout): spread %v, want %v", got, want)
	}
	t.Logf("Rollout %s/plain (PlacementPolicy rollouts, %s): per-term %v", ns, capacityStrategy, got)
}

// createRollout creates Rollout ns/name (replicas pods of podTemplate(name), canary
// strategy) with the given labels and annotations, and returns it as created.
func createRollout(ctx context.Context, t *testing.T, dyn dynamic.Interface, ns, name string, lbls, annotations map[string]string, replicas int) *unstructured.Unstructured {
	t.Helper()
	created, err := dyn.Resource(rollouts).Namespace(ns).Create(ctx, rolloutObject(t, ns, name, lbls, annotations, replicas), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating Rollout %s/%s: %v", ns, name, err)
	}
	return created
}

// rolloutObject is Rollout ns/name (replicas pods of podTemplate(name), canary
// strategy) with the given labels and annotations.
func rolloutObject(t *testing.T, ns, name string, lbls, annotations map[string]string, replicas int) *unstructured.Unstructured {
	t.Helper()
	tmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ptr(podTemplate(name, nil)))
	if err != nil {
		t.Fatal(err)
	}
	unstructured.RemoveNestedField(tmpl, "metadata", "creationTimestamp")
	meta := map[string]any{"name": name, "namespace": ns}
	if lbls != nil {
		meta["labels"] = toAny(lbls)
	}
	if annotations != nil {
		meta["annotations"] = toAny(annotations)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": rollouts.GroupVersion().String(), "kind": "Rollout", "metadata": meta,
		"spec": map[string]any{
			"replicas": int64(replicas),
			"selector": map[string]any{"matchLabels": map[string]any{"app": name}},
			"template": tmpl,
			"strategy": map[string]any{"canary": map[string]any{}},
		},
	}}
	return obj
}

// spreadRolloutJSON runs `spread rollout/NAME -o json` and returns its one workload;
// the exit status must agree with its verdict (0 exact, 3 not).
func spreadRolloutJSON(ctx context.Context, t *testing.T, ns, name string) map[string]any {
	t.Helper()
	cmd := exec.CommandContext(ctx, env.webhook.Bin, "spread", "--kubeconfig", env.hc.Kubeconfig(), "-n", ns, "rollout/"+name, "-o", "json")
	out, err := cmd.Output()
	code := cmd.ProcessState.ExitCode()
	if err != nil && code != 3 {
		t.Fatalf("spread rollout/%s: %v\n%s", name, err, out)
	}
	var doc struct {
		Workloads []map[string]any `json:"workloads"`
	}
	if err := json.Unmarshal(out, &doc); err != nil || len(doc.Workloads) != 1 {
		t.Fatalf("spread rollout/%s: want one workload, got %v:\n%s", name, err, out)
	}
	if exact := doc.Workloads[0]["exact"] == true; exact != (code == 0) {
		t.Fatalf("spread exited %d for a workload with exact=%v", code, exact)
	}
	return doc.Workloads[0]
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// createRolloutReplicaSet creates the ReplicaSet <rollout>-1 that the Rollout controls,
// as Argo Rollouts makes one: the Rollout's pod template (no strategy on it) with a
// pod-template-hash label, a controller owner reference with the Rollout's UID.
func createRolloutReplicaSet(ctx context.Context, t *testing.T, rollout *unstructured.Unstructured, replicas int) {
	t.Helper()
	name := rollout.GetName()
	tmpl := podTemplate(name, nil)
	tmpl.Labels["rollouts-pod-template-hash"] = "1"
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Name: name + "-1", Namespace: rollout.GetNamespace(), Labels: tmpl.Labels,
			Annotations: map[string]string{"rollout.argoproj.io/revision": "1"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: rollouts.GroupVersion().String(), Kind: "Rollout", Name: name, UID: rollout.GetUID(),
				Controller: ptr(true), BlockOwnerDeletion: ptr(true),
			}},
		},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: tmpl.Labels},
			Template: tmpl,
		},
	}
	if _, err := env.client.AppsV1().ReplicaSets(rs.Namespace).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ReplicaSet %s/%s of Rollout %s: %v", rs.Namespace, rs.Name, name, err)
	}
}

// settledReplicaSet waits until the ReplicaSet <rollout>-1 has exactly replicas pods,
// all Running with a node and none terminating, and returns them.
func settledReplicaSet(ctx context.Context, t *testing.T, ns, rollout string, replicas int) []corev1.Pod {
	t.Helper()
	name := rollout + "-1"
	var pods []corev1.Pod
	var state string
	err := wait.PollUntilContextTimeout(ctx, time.Second, settleTimeout, true, func(ctx context.Context) (bool, error) {
		rs, err := env.client.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, fmt.Errorf("ReplicaSet %s/%s is gone (garbage-collected: its Rollout not found?)", ns, name)
		}
		if err != nil {
			state = err.Error()
			return false, nil
		}
		state = fmt.Sprintf("replicas %d ready %d (want %d)", rs.Status.Replicas, rs.Status.ReadyReplicas, replicas)
		list, err := env.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(rs.Spec.Selector.MatchLabels).String()})
		if err != nil {
			state = err.Error()
			return false, nil
		}
		running := 0
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" {
				running++
			}
		}
		state += fmt.Sprintf("; %d pods, %d Running", len(list.Items), running)
		if running != replicas || len(list.Items) != replicas {
			return false, nil
		}
		pods = list.Items
		return true, nil
	})
	if err != nil {
		t.Fatalf("ReplicaSet %s/%s did not settle at %d pods: %v; last state: %s", ns, name, replicas, err, state)
	}
	return pods
}

// TestRolloutAnnotationChangeConverges: the convergence loop follows a Rollout: a
// changed annotation on the Rollout moves its ReplicaSet's pods to the new target, with
// Converge Events on the Rollout; and the policy status counts an un-annotated
// Rollout it governs (workloads 1, exact 1).
func TestRolloutAnnotationChangeConverges(t *testing.T) {
	ctx := context.Background()
	dyn := dynamicClient(t)
	ns := policyNamespace(ctx, t, "e2e-argo-rollouts-converge", nil, "")
	startConverger(ctx, t, "converge-rollout", 16)
	const replicas = 8
	ro := createRollout(ctx, t, dyn, ns, "canary", nil, map[string]string{strategy.AnnotationStrategy: capacityStrategy}, replicas)
	createRolloutReplicaSet(ctx, t, ro, replicas)
	if err := createPolicy(ctx, t, dyn, ns, "rollouts", map[string]any{"strategy": capacityStrategy, "kinds": []any{"Rollout"},
		"selector": map[string]any{"matchLabels": map[string]any{"team": "web"}}}); err != nil {
		t.Fatalf("creating the PlacementPolicy for Rollouts: %v", err)
	}
	plain := createRollout(ctx, t, dyn, ns, "plain", map[string]string{"team": "web"}, nil, 4)
	createRolloutReplicaSet(ctx, t, plain, 4)
	assertExactSpread(ctx, t, capacityStrategy, settledReplicaSet(ctx, t, ns, "canary", replicas))
	assertExactSpread(ctx, t, capacityStrategy, settledReplicaSet(ctx, t, ns, "plain", 4))

	// As TestAnnotationChangeConverges: the same terms, another split.
	const next = "karpenter.sh/capacity-type=on-demand,base=1,weight=1:karpenter.sh/capacity-type=spot,weight=1"
	patch := []byte(`{"metadata":{"annotations":{"` + strategy.AnnotationStrategy + `":"` + next + `"}}}`)
	if _, err := dyn.Resource(rollouts).Namespace(ns).Patch(ctx, "canary", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("changing the Rollout's annotation: %v", err)
	}
	took := waitExact(ctx, t, ns, "canary", next, replicas, 4*time.Minute)
	t.Logf("MEASURED Rollout annotation changed -> exact on %s: %s", next, took.Round(time.Second))
	got := assertExactSpread(ctx, t, next, settledReplicaSet(ctx, t, ns, "canary", replicas))
	t.Logf("Rollout %s/canary after the change: per-term %v", ns, got)

	list, err := env.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Rollout,involvedObject.name=canary,reason=Converge"})
	if err != nil {
		t.Fatalf("listing events: %v", err)
	}
	if len(list.Items) == 0 {
		t.Errorf("no Converge Event on Rollout %s/canary", ns)
	} else {
		t.Logf("%d Converge Events on the Rollout, e.g. %q", len(list.Items), list.Items[0].Message)
	}

	var counts string
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		u, err := dyn.Resource(v1alpha1.PlacementPolicies).Namespace(ns).Get(ctx, "rollouts", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		workloads, _, _ := unstructured.NestedInt64(u.Object, "status", "workloads")
		exact, _, _ := unstructured.NestedInt64(u.Object, "status", "exact")
		counts = fmt.Sprintf("workloads %d, exact %d", workloads, exact)
		return workloads == 1 && exact == 1, nil
	}); err != nil {
		t.Errorf("PlacementPolicy rollouts status: %s, want workloads 1, exact 1 (Rollout plain)", counts)
	}
	t.Logf("PlacementPolicy %s/rollouts status: %s", ns, counts)
}
