//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// labelNodePool is Karpenter's label naming a node's NodePool.
const labelNodePool = "karpenter.sh/nodepool"

// Strategies used by the scenarios. Their terms select disjoint labels, so a pod's
// nodeSelector names exactly one term.
const (
	seedStrategy     = "nodesize=od4vcpu16gb,base=1,weight=0:nodesize=spot4vcpu16gb,weight=1:nodesize=spot8vcpu32gb,weight=1"
	capacityStrategy = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"
)

// How long a workload may take to settle: pods admitted, nodes provisioned by
// Karpenter, pods Running. Generous for a loaded 2-core machine; a wait, not an assertion.
const settleTimeout = 6 * time.Minute

// newNamespace creates a namespace for one test, opted in to the webhook (the default
// scope is opt-in), and deletes it afterwards
// (kept when E2E_KEEP=1, for debugging).
func newNamespace(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	return newNamespaceLabelled(ctx, t, name, map[string]string{strategy.LabelNamespaceEnabled: "true"})
}

// newNamespaceLabelled is newNamespace with the given labels instead of the opt-in
// label (nil: none, so the webhook is not sent its pods).
func newNamespaceLabelled(ctx context.Context, t *testing.T, name string, labels map[string]string) string {
	t.Helper()
	c := env.client.CoreV1().Namespaces()
	if err := c.Delete(ctx, name, metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		// Left over from an earlier test or run (maybe already terminating): wait until it is gone.
		err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := c.Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Fatalf("namespace %s from an earlier run is still terminating: %v", name, err)
		}
	}
	if _, err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		if os.Getenv("E2E_KEEP") == "1" {
			return
		}
		if err := c.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("deleting namespace %s: %v", name, err)
		}
	})
	return name
}

// podTemplate is a small pod: kwok runs it; Karpenter sizes nodes by its requests.
func podTemplate(app string, annotations map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}, Annotations: annotations},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:    "app",
				Image:   "registry.k8s.io/pause:3.10",
				Command: []string{"/pause"},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("10m"),
					corev1.ResourceMemory: resource.MustParse("16Mi"),
				}},
			}},
			TerminationGracePeriodSeconds: ptr(int64(5)),
		},
	}
}

// deployment builds a Deployment; the strategy goes on the pod template when
// onTemplate is set, else on the Deployment itself (both are valid places).
func deployment(ns, name, strat string, replicas int, onTemplate bool) *appsv1.Deployment {
	ann := map[string]string{strategy.AnnotationStrategy: strat}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: podTemplate(name, nil),
		},
	}
	if onTemplate {
		d.Spec.Template.Annotations = ann
	} else {
		d.Annotations = ann
	}
	return d
}

func ptr[T any](v T) *T { return &v }

func createDeployment(ctx context.Context, t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	if _, err := env.client.AppsV1().Deployments(d.Namespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating deployment %s/%s: %v", d.Namespace, d.Name, err)
	}
}

// scaleDeployment sets the Deployment's replicas as kubectl scale does: a patch of its
// scale subresource, which no status update of the controller's can conflict with (a
// read-then-update of the scale did, once under load).
func scaleDeployment(ctx context.Context, t *testing.T, ns, name string, replicas int) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if _, err := env.client.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "scale"); err != nil {
		t.Fatalf("scaling %s/%s to %d: %v", ns, name, replicas, err)
	}
}

// settled waits until the Deployment's rollout is complete and the only pods left
// are exactly `replicas` pods of its current revision, all Running with a node
// (no Pending, no Terminating, no pods of an older revision). It returns them.
func settled(ctx context.Context, t *testing.T, ns, name string, replicas int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	var state string
	err := wait.PollUntilContextTimeout(ctx, time.Second, settleTimeout, true, func(ctx context.Context) (bool, error) {
		d, err := env.client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			state = err.Error()
			return false, nil
		}
		st := d.Status
		state = fmt.Sprintf("deployment generation %d/%d, replicas %d updated %d ready %d available %d (want %d)",
			st.ObservedGeneration, d.Generation, st.Replicas, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas, replicas)
		if st.ObservedGeneration < d.Generation || int(st.Replicas) != replicas || int(st.UpdatedReplicas) != replicas ||
			int(st.ReadyReplicas) != replicas || int(st.AvailableReplicas) != replicas {
			return false, nil
		}
		hash, err := currentTemplateHash(ctx, d)
		if err != nil {
			state = err.Error()
			return false, nil
		}
		list, err := env.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{
			LabelSelector: labels.SelectorFromSet(d.Spec.Selector.MatchLabels).String(),
		})
		if err != nil {
			state = err.Error()
			return false, nil
		}
		var current, other, notRunning int
		for _, p := range list.Items {
			switch {
			case p.DeletionTimestamp != nil || p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] != hash:
				other++
			case p.Status.Phase != corev1.PodRunning || p.Spec.NodeName == "":
				notRunning++
			default:
				current++
			}
		}
		state += fmt.Sprintf("; pods: %d Running of the current revision, %d not Running, %d terminating or of older revisions",
			current, notRunning, other)
		if current != replicas || notRunning != 0 || other != 0 {
			return false, nil
		}
		pods = list.Items
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s/%s did not settle at %d replicas: %v; last state: %s", ns, name, replicas, err, state)
	}
	return pods
}

// currentTemplateHash is the pod-template-hash of the Deployment's newest ReplicaSet.
func currentTemplateHash(ctx context.Context, d *appsv1.Deployment) (string, error) {
	rsList, err := env.client.AppsV1().ReplicaSets(d.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(d.Spec.Selector.MatchLabels).String(),
	})
	if err != nil {
		return "", fmt.Errorf("listing replicasets: %w", err)
	}
	rev := d.Annotations["deployment.kubernetes.io/revision"]
	for _, rs := range rsList.Items {
		if metav1.IsControlledBy(&rs, d) && rs.Annotations["deployment.kubernetes.io/revision"] == rev {
			return rs.Labels[appsv1.DefaultDeploymentUniqueLabelKey], nil
		}
	}
	return "", fmt.Errorf("no replicaset of revision %q yet", rev)
}

// nodes returns every node by name.
func nodes(ctx context.Context, t *testing.T) map[string]corev1.Node {
	t.Helper()
	list, err := env.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing nodes: %v", err)
	}
	m := make(map[string]corev1.Node, len(list.Items))
	for _, n := range list.Items {
		m[n.Name] = n
	}
	return m
}

// assertExactSpread checks that pods (one revision, settled) hold exactly the
// strategy's target for len(pods): per term, counted by what decides placement
// (the pod's nodeSelector, and a set term's required node affinity In), and that
// every pod is Running on a Karpenter node whose labels satisfy both, with seat
// and term annotations that
// agree with the seat sequence and seats 1..n each taken once.
// It returns the per-term counts.
func assertExactSpread(ctx context.Context, t *testing.T, strat string, pods []corev1.Pod) []int {
	t.Helper()
	s, err := strategy.Parse(strat)
	if err != nil {
		t.Fatalf("parsing %q: %v", strat, err)
	}
	n := len(pods)
	want := s.Target(n)
	got := make([]int, len(s.Terms))
	allNodes := nodes(ctx, t)
	var seats []int
	var problems []string
	for _, p := range pods {
		sel := strategy.PlacementSelector(&p)
		term := termOfSelector(s, sel)
		if term < 0 {
			problems = append(problems, fmt.Sprintf("pod %s: selects %v, which matches no term (not mutated?)", p.Name, sel))
		} else {
			got[term]++
		}
		if msg := checkPlacement(p, allNodes); msg != "" {
			problems = append(problems, msg)
		}
		seat, err := strconv.Atoi(p.Annotations[strategy.AnnotationSeat])
		if err != nil {
			problems = append(problems, fmt.Sprintf("pod %s: seat annotation %q: %v", p.Name, p.Annotations[strategy.AnnotationSeat], err))
			continue
		}
		seats = append(seats, seat)
		if ts := s.TermOfSeat(seat); ts != term {
			problems = append(problems, fmt.Sprintf("pod %s: seat %d belongs to term %d, but its nodeSelector selects term %d", p.Name, seat, ts+1, term+1))
		}
		if a := p.Annotations[strategy.AnnotationTerm]; a != strconv.Itoa(term+1) {
			problems = append(problems, fmt.Sprintf("pod %s: term annotation %q, nodeSelector selects term %d", p.Name, a, term+1))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("per-term pod counts %v, want the target for %d pods %v (strategy %s)", got, n, want, strat)
	}
	if dup, missing := seatProblems(seats, n); len(dup) > 0 || len(missing) > 0 {
		t.Errorf("seats must be 1..%d, each held once: held more than once %s; free %s", n, compactInts(dup), compactInts(missing))
	}
	for _, msg := range problems {
		t.Error(msg)
	}
	return got
}

// termOfSelector returns the 0-based index of the first term whose labels are all
// in sel (a nodeSelector, or strategy.PlacementSelector's form, where a set term's
// values are joined in any order), or -1.
func termOfSelector(s *strategy.Strategy, sel map[string]string) int {
	for i, term := range s.Terms {
		ok := true
		for k, v := range term.LabelMap() {
			have, found := sel[k]
			if !found || !sameSet(strategy.SplitValues(have), strategy.SplitValues(v)) {
				ok = false
				break
			}
		}
		if ok {
			return i
		}
	}
	return -1
}

// checkPlacement returns "" when the pod is Running on a Karpenter-provisioned
// node whose labels satisfy the pod's nodeSelector, else what is wrong.
func checkPlacement(p corev1.Pod, allNodes map[string]corev1.Node) string {
	if p.Status.Phase != corev1.PodRunning {
		return fmt.Sprintf("pod %s: phase %s, want Running", p.Name, p.Status.Phase)
	}
	node, ok := allNodes[p.Spec.NodeName]
	if !ok {
		return fmt.Sprintf("pod %s: node %q not found", p.Name, p.Spec.NodeName)
	}
	if node.Labels[labelNodePool] == "" {
		return fmt.Sprintf("pod %s: node %s was not provisioned by Karpenter (no %s label)", p.Name, node.Name, labelNodePool)
	}
	for k, v := range strategy.PlacementSelector(&p) {
		if !slices.Contains(strategy.SplitValues(v), node.Labels[k]) {
			return fmt.Sprintf("pod %s: node %s has %s=%q, the pod selects %q", p.Name, node.Name, k, node.Labels[k], v)
		}
	}
	return ""
}

// sameSet reports whether a and b hold the same values, in any order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// assertNotMutated checks that the webhook left pods exactly as their template made them.
func assertNotMutated(t *testing.T, pods []corev1.Pod, template corev1.PodTemplateSpec) {
	t.Helper()
	for _, p := range pods {
		if v, ok := p.Annotations[strategy.AnnotationSeat]; ok {
			t.Errorf("pod %s/%s has seat annotation %q, want none", p.Namespace, p.Name, v)
		}
		if v, ok := p.Annotations[strategy.AnnotationTerm]; ok {
			t.Errorf("pod %s/%s has term annotation %q, want none", p.Namespace, p.Name, v)
		}
		if v, ok := p.Labels[strategy.LabelManaged]; ok {
			t.Errorf("pod %s/%s has label %s=%q, want none", p.Namespace, p.Name, strategy.LabelManaged, v)
		}
		if v, ok := p.Annotations["controller.kubernetes.io/pod-deletion-cost"]; ok && template.Annotations["controller.kubernetes.io/pod-deletion-cost"] == "" {
			t.Errorf("pod %s/%s has a pod-deletion-cost %q, want none", p.Namespace, p.Name, v)
		}
		if !mapsEqual(p.Spec.NodeSelector, template.Spec.NodeSelector) {
			t.Errorf("pod %s/%s nodeSelector %v, want the template's %v", p.Namespace, p.Name, p.Spec.NodeSelector, template.Spec.NodeSelector)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// seatProblems returns the seats held by more than one pod, and the seats of
// 1..n that no pod holds, both sorted.
func seatProblems(seats []int, n int) (dup, missing []int) {
	held := make(map[int]int, len(seats))
	for _, s := range seats {
		held[s]++
	}
	for s, c := range held {
		if c > 1 {
			dup = append(dup, s)
		}
	}
	for s := 1; s <= n; s++ {
		if held[s] == 0 {
			missing = append(missing, s)
		}
	}
	sort.Ints(dup)
	return dup, missing
}

// compactInts renders a sorted list as ranges: "1-5,7,9-10" ("none" when empty).
func compactInts(xs []int) string {
	if len(xs) == 0 {
		return "none"
	}
	var b strings.Builder
	for i := 0; i < len(xs); {
		j := i
		for j+1 < len(xs) && xs[j+1] == xs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", xs[i], xs[j])
		} else {
			fmt.Fprintf(&b, "%d", xs[i])
		}
		i = j + 1
	}
	return b.String()
}

// podsBySeat indexes pods by their seat annotation.
func podsBySeat(pods []corev1.Pod) map[int]corev1.Pod {
	m := make(map[int]corev1.Pod, len(pods))
	for _, p := range pods {
		if seat, err := strconv.Atoi(p.Annotations[strategy.AnnotationSeat]); err == nil {
			m[seat] = p
		}
	}
	return m
}

// podNames returns the set of pod names.
func podNames(pods []corev1.Pod) map[string]bool {
	m := make(map[string]bool, len(pods))
	for _, p := range pods {
		m[p.Name] = true
	}
	return m
}

// replicaSetOf waits for the Deployment's first ReplicaSet and returns it.
func replicaSetOf(ctx context.Context, t *testing.T, ns string, d *appsv1.Deployment) *appsv1.ReplicaSet {
	t.Helper()
	var rs *appsv1.ReplicaSet
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := env.client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(d.Spec.Selector.MatchLabels).String()})
		if err != nil || len(list.Items) == 0 {
			return false, nil
		}
		rs = &list.Items[0]
		return true, nil
	})
	if err != nil {
		t.Fatalf("no ReplicaSet for %s: %v", d.Name, err)
	}
	return rs
}
