//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// TestDryRunMutationsStayValid sends adversarial pods (the admission fuzz test's seed
// inputs, plus generated ones) through the real webhook with server-side dry-run
// CREATEs, and checks with the API server's own pod validation that a mutation never
// turns a valid pod invalid: every pod the API server accepts unmutated (in the
// blocklisted namespace, which the webhook leaves alone) it also accepts mutated.
// Dry-run admissions get the patch but reserve no seat (docs/design/placement.md).
func TestDryRunMutationsStayValid(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := newNamespace(ctx, t, "e2e-dryrun")
	plain := newNamespace(ctx, t, blocklistedNamespace)

	// A Deployment scaled to 0 still has its ReplicaSet: the owner the pods name. Each
	// pod carries its own strategy (read before the workload's).
	d := deployment(ns, "web", capacityStrategy, 0, false)
	createDeployment(ctx, t, d)
	var rs *appsv1.ReplicaSet
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := env.client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) == 0 {
			return false, nil
		}
		rs = &list.Items[0]
		return true, nil
	}); err != nil {
		t.Fatalf("no ReplicaSet for Deployment %s/web: %v", ns, err)
	}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns, Annotations: map[string]string{strategy.AnnotationStrategy: capacityStrategy}},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr(int32(0)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Template: podTemplate("db", nil),
		},
	}
	sts, err := env.client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating StatefulSet: %v", err)
	}

	pods := adversarialPods(rs, sts, 200)
	var accepted, placed, rejectedBoth int
	for i, pod := range pods {
		unmutated := pod.DeepCopy()
		unmutated.Namespace = plain
		_, plainErr := env.client.CoreV1().Pods(plain).Create(ctx, unmutated, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		mutated := pod.DeepCopy()
		mutated.Namespace = ns
		got, err := env.client.CoreV1().Pods(ns).Create(ctx, mutated, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case plainErr != nil && err != nil:
			rejectedBoth++
			if rejectedBoth <= 3 {
				t.Logf("pod %d is invalid either way, e.g.: %v", i, plainErr)
			}
		case plainErr != nil:
			t.Logf("pod %d: accepted only mutated (unmutated: %v)", i, plainErr)
		case err != nil:
			t.Errorf("pod %d: the API server accepts it unmutated but rejects the mutated pod: %v\npod: %+v", i, err, pod)
		default:
			accepted++
			if _, ok := got.Annotations[strategy.AnnotationSeat]; ok {
				placed++
			}
		}
	}
	t.Logf("%d pods: %d accepted unmutated and mutated (%d of them placed by the webhook), %d invalid either way",
		len(pods), accepted, placed, rejectedBoth)
	if placed < len(pods)/4 {
		t.Errorf("only %d of %d pods were placed: the test exercises too few patches", placed, len(pods))
	}
	// Dry-run reserved nothing: no seat Lease for the revision exists.
	leases, err := env.client.CoordinationV1().Leases(webhookNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Items {
		if strings.Contains(l.Name, string(rs.UID)) || strings.Contains(l.Name, string(sts.UID)) {
			t.Errorf("dry-run left seat Lease %s", l.Name)
		}
	}
}

// adversarialPods returns the admission fuzz test's seed shapes and n generated pods:
// odd label and annotation keys (with '/' and '~', the JSON-pointer escapes), empty
// and maximal values, nodeSelectors that agree or conflict with the terms, tolerations
// of every operator and effect, seat annotations already set, StatefulSet ordinals
// from 0 to past the seat limit, forged owner UIDs, and strategies of every shape.
func adversarialPods(rs *appsv1.ReplicaSet, sts *appsv1.StatefulSet, n int) []*corev1.Pod {
	owner := func(kind, name string, uid types.UID) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: uid, Controller: ptr(true)}}
	}
	base := func(app string) *corev1.Pod {
		tmpl := podTemplate(app, nil)
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: app + "-", Labels: tmpl.Labels, Annotations: map[string]string{}}, Spec: tmpl.Spec}
	}
	rsPod := func(strat string) *corev1.Pod {
		p := base("web")
		p.OwnerReferences = owner("ReplicaSet", rs.Name, rs.UID)
		p.Annotations[strategy.AnnotationStrategy] = strat
		return p
	}
	stsPod := func(strat, index string, uid types.UID) *corev1.Pod {
		p := base("db")
		p.OwnerReferences = owner("StatefulSet", sts.Name, uid)
		p.Labels[appsv1.PodIndexLabel] = index
		p.Annotations[strategy.AnnotationStrategy] = strat
		return p
	}
	twenty := make([]string, 20)
	for i := range twenty {
		twenty[i] = fmt.Sprintf("example.com/pool=p%d,weight=%d", i, 1+i*50)
	}
	strategies := []string{
		capacityStrategy, seedStrategy, strings.Join(twenty, ":"),
		"a=1:a=1", "a=1,b=2:b=2,a=1", "a=1:a=1,b=2",
		"example.com/a~b=x:example.com/c=", "k=" + strings.Repeat("v", 63) + ",base=100000,weight=1000:k=w",
		"a=1,weight=x", "", "nodesize",
	}
	// Mostly valid names, so most pods are valid and the patch is what is tested; a few
	// invalid ones ('~' is no label character) keep the unmutated pod invalid too.
	keys := []string{"app", "example.com/a", "example.com/b~c", "karpenter.sh/capacity-type", "nodesize", "k", "a", "b",
		strings.Repeat("k", 63), "kubernetes.io/arch", "x.io/y", "x.io/z", "c", "d", "e", "f"}
	values := []string{"", "1", "2", "on-demand", "spot", "v~/", strings.Repeat("v", 63), "a.b-c_d", "x", "y", "z", "amd64"}

	var pods []*corev1.Pod
	// The admission fuzz test's seeds.
	pods = append(pods,
		rsPod(capacityStrategy),
		stsPod(seedStrategy, "4", sts.UID),
		stsPod(seedStrategy, "9223372036854775807", sts.UID),
		stsPod(seedStrategy, "2147483646", sts.UID),
		stsPod(strings.Join(twenty, ":"), "100000000", sts.UID),
		stsPod(strings.Join(twenty, ":"), "100000000", "forged"),
		rsPod("a=1:a=1"), rsPod("a=1,b=2:b=2,a=1"), rsPod("a=1:a=1,b=2"),
	)
	conflict := rsPod("karpenter.sh/capacity-type=spot")
	conflict.Spec.NodeSelector = map[string]string{"karpenter.sh/capacity-type": "on-demand"}
	seated := rsPod(capacityStrategy)
	seated.Annotations[strategy.AnnotationSeat] = "3"
	tolerated := rsPod("karpenter.sh/capacity-type=spot")
	tolerated.Spec.NodeSelector = map[string]string{"kubernetes.io/arch": "amd64"}
	tolerated.Spec.Tolerations = []corev1.Toleration{{Key: "karpenter.sh/capacity-type", Operator: corev1.TolerationOpEqual, Value: "spot", Effect: corev1.TaintEffectNoSchedule}}
	pods = append(pods, conflict, seated, tolerated)

	r := rand.New(rand.NewPCG(11, 12))
	pick := func(xs []string) string { return xs[r.IntN(len(xs))] }
	for range n {
		var p *corev1.Pod
		strat := pick(strategies)
		switch r.IntN(4) {
		case 0:
			index := strconv.Itoa(r.IntN(50))
			switch r.IntN(4) {
			case 0:
				index = strconv.FormatInt(r.Int64N(1<<62), 10)
			case 1:
				index = strconv.Itoa(2147483640 + r.IntN(20))
			}
			uid := sts.UID
			if r.IntN(5) == 0 {
				uid = "forged-" + types.UID(strconv.Itoa(r.IntN(100)))
			}
			p = stsPod(strat, index, uid)
		default:
			p = rsPod(strat)
		}
		for range r.IntN(3) {
			p.Labels[pick(keys)] = pick(values)
		}
		for range r.IntN(3) {
			p.Annotations[pick(keys)] = pick(values)
		}
		if r.IntN(10) == 0 {
			p.Annotations[strategy.AnnotationSeat] = strconv.Itoa(r.IntN(5))
		}
		if r.IntN(10) == 0 {
			p.Annotations["controller.kubernetes.io/pod-deletion-cost"] = strconv.Itoa(r.IntN(100))
		}
		if r.IntN(2) == 0 {
			p.Spec.NodeSelector = map[string]string{}
			for range 1 + r.IntN(2) {
				p.Spec.NodeSelector[pick(keys)] = pick(values)
			}
		}
		for range r.IntN(3) {
			t := corev1.Toleration{Key: pick(keys), Effect: []corev1.TaintEffect{"", corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute, corev1.TaintEffectPreferNoSchedule}[r.IntN(4)]}
			if r.IntN(2) == 0 && t.Key != "" {
				t.Operator, t.Value = corev1.TolerationOpEqual, pick(values)
			} else {
				t.Operator = corev1.TolerationOpExists
			}
			p.Spec.Tolerations = append(p.Spec.Tolerations, t)
		}
		pods = append(pods, p)
	}
	return pods
}
