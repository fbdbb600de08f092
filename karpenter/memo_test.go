package karpenter

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
)

// runCatalog starts a catalog over the fakes and waits for its sync.
func runCatalog(t testing.TB, o Options) *Catalog {
	t.Helper()
	c, err := NewCatalog(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "catalog sync", c.HasSynced)
	return c
}

// Tolerations' answers follow every change of capacity that matters to them, and only
// those count as changes: a node's heartbeat or a NodePool's resource counts do not.
func TestTolerationsFollowCapacityChanges(t *testing.T) {
	ctx := context.Background()
	kube := kubefake.NewClientset(node("n-a", true, map[string]string{"nodesize": "a"}))
	kube.Resources = []*metav1.APIResourceList{{GroupVersion: nodePoolGroupVersion, APIResources: []metav1.APIResource{{Name: "nodepools", Kind: "NodePool"}}}}
	spot := pool("spot", nil, req(capType, corev1.NodeSelectorOpIn, "spot"))
	spot.Spec.Template.Spec.Taints = []corev1.Taint{{Key: "capacity", Value: "spot", Effect: corev1.TaintEffectNoSchedule}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{nodePoolGVR(): "NodePoolList"}, unstructuredPool(t, spot))
	groups := &fakeGroups{}
	c := runCatalog(t, Options{Kube: kube, Dynamic: dyn, NodeGroups: groups})

	spotTol := corev1.Toleration{Key: "capacity", Operator: corev1.TolerationOpEqual, Value: "spot", Effect: corev1.TaintEffectNoSchedule}
	check := func(what string, tm map[string]string, wantTols []corev1.Toleration, wantServed bool) {
		t.Helper()
		tols, served := c.Tolerations(tm)
		same := reflect.DeepEqual(tols, wantTols) || len(tols)+len(wantTols) == 0
		if !same || served != wantServed {
			t.Fatalf("%s: Tolerations(%v) = %v, %v; want %v, %v", what, tm, tols, served, wantTols, wantServed)
		}
	}
	// waitAnswer waits until Tolerations(tm) reports served (the informers deliver
	// events asynchronously).
	waitAnswer := func(what string, tm map[string]string, served bool) {
		t.Helper()
		waitFor(t, what, func() bool { _, s := c.Tolerations(tm); return s == served })
	}
	check("a Ready node", term("nodesize", "a"), nil, true)
	check("nothing", term("nodesize", "b"), nil, false)
	check("a NodePool with a taint", term(capType, "spot"), []corev1.Toleration{spotTol}, true)

	// The answer is the caller's: changing it changes no later answer.
	tols, _ := c.Tolerations(term(capType, "spot"))
	tols[0].Key = "changed"
	check("after a caller changed its answer", term(capType, "spot"), []corev1.Toleration{spotTol}, true)

	// A heartbeat and a NodePool status update change nothing that matters; a node
	// added afterwards does. Events arrive in order, so once the new node serves, the
	// others were seen, and only the new node counted.
	before := c.capacityGen.Load()
	n := node("n-a", true, map[string]string{"nodesize": "a"})
	n.Status.Conditions[1].LastHeartbeatTime = metav1.Now()
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")}
	if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	spot.Status.Resources = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}
	if _, err := dyn.Resource(nodePoolGVR()).UpdateStatus(ctx, unstructuredPool(t, spot), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Nodes().Create(ctx, node("n-b", true, map[string]string{"nodesize": "b"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer("the new node", term("nodesize", "b"), true)
	if got := c.capacityGen.Load() - before; got != 1 {
		t.Fatalf("%d capacity changes counted for a heartbeat, a NodePool status update and a new node; want 1", got)
	}

	// A node that stops being Ready no longer serves.
	if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, node("n-a", false, map[string]string{"nodesize": "a"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer("the node not Ready", term("nodesize", "a"), false)

	// A changed NodePool taint changes the tolerations.
	spot.Spec.Template.Spec.Taints[0].Value = "yes"
	if _, err := dyn.Resource(nodePoolGVR()).Update(ctx, unstructuredPool(t, spot), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new taint", func() bool {
		tols, _ := c.Tolerations(term(capType, "spot"))
		return len(tols) == 1 && tols[0].Value == "yes"
	})

	// A node group appears: it serves once the view's generation moves.
	groups.groups = []nodegroups.Group{{Name: "ng", Status: "ACTIVE",
		Labels: map[string]string{"nodesize": "c", nodegroups.LabelNodeGroup: "ng"}}}
	groups.gen++
	check("a new node group", term("nodesize", "c"), nil, true)

	// A deleted NodePool no longer serves.
	if err := dyn.Resource(nodePoolGVR()).Delete(ctx, "spot", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAnswer("the deleted NodePool", term(capType, "spot"), false)
}

// An answer computed from an older state than the memo's is not kept, and the memo
// stays bounded whatever the number of terms.
func TestTolerationsMemoBounds(t *testing.T) {
	var m tolerationsMemo
	old, cur := memoGeneration{capacity: 1}, memoGeneration{capacity: 2}
	if _, ok := m.get("k", cur); ok {
		t.Fatal("empty memo answered")
	}
	m.put("k", old, tolerationsAnswer{served: true})
	if _, ok := m.get("k", cur); ok {
		t.Fatal("an answer of an older generation was kept")
	}
	m.put("k", cur, tolerationsAnswer{served: true})
	if a, ok := m.get("k", cur); !ok || !a.served {
		t.Fatal("answer of the current generation not kept")
	}
	for i := range 3 * maxMemoTerms {
		m.put(fmt.Sprint(i), cur, tolerationsAnswer{})
	}
	if len(m.answers) > maxMemoTerms {
		t.Fatalf("memo holds %d answers, bound %d", len(m.answers), maxMemoTerms)
	}
}

func TestSelectorKeyKeepsSelectorsApart(t *testing.T) {
	// Before validation a nodeSelector may hold any character.
	a, b := selectorKey(term("a", "b,c=d")), selectorKey(term("a", "b", "c", "d"))
	if a == b {
		t.Fatalf("two terms share the key %q", a)
	}
	if selectorKey(term("x", "1", "y", "2")) != selectorKey(map[string]string{"y": "2", "x": "1"}) {
		t.Fatal("the key depends on map order")
	}
}

// BenchmarkTolerations compares the answer per admission with 1,000 Ready nodes and 20
// NodePools, remembered against computed (Serving walks every NodePool and Node).
func BenchmarkTolerations(b *testing.B) {
	var objs []runtime.Object
	for i := range 1000 {
		objs = append(objs, node(fmt.Sprintf("n-%d", i), true, map[string]string{capType: "spot", karpv1.NodePoolLabelKey: "legacy"}))
	}
	kube := kubefake.NewClientset(objs...)
	kube.Resources = []*metav1.APIResourceList{{GroupVersion: nodePoolGroupVersion, APIResources: []metav1.APIResource{{Name: "nodepools", Kind: "NodePool"}}}}
	var pools []runtime.Object
	for i := range 20 {
		pools = append(pools, unstructuredPool(b, pool(fmt.Sprintf("p-%d", i), nil, req(capType, corev1.NodeSelectorOpIn, "spot"))))
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{nodePoolGVR(): "NodePoolList"}, pools...)
	c := runCatalog(b, Options{Kube: kube, Dynamic: dyn})
	tm := term(capType, "spot")
	b.Run("remembered", func(b *testing.B) {
		for b.Loop() {
			c.Tolerations(tm)
		}
	})
	b.Run("computed", func(b *testing.B) {
		for b.Loop() {
			TolerationsFor(c.Serving(tm))
		}
	})
}
