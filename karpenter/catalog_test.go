package karpenter

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
)

type fakeGroups struct {
	groups []nodegroups.Group
	gen    uint64 // bump when groups change
}

func (f *fakeGroups) Run(ctx context.Context)    { <-ctx.Done() }
func (f *fakeGroups) HasSynced() bool            { return true }
func (f *fakeGroups) Groups() []nodegroups.Group { return f.groups }
func (f *fakeGroups) Generation() uint64         { return f.gen }

func node(name string, ready bool, labels map[string]string) *corev1.Node {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}, {Type: corev1.NodeReady, Status: st}},
			Images:     []corev1.ContainerImage{{Names: []string{"big"}}},
		},
	}
}

func unstructuredPool(t testing.TB, np *karpv1.NodePool) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(np)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func names(sources []Source) []string {
	out := []string{}
	for _, s := range sources {
		out = append(out, s.String())
	}
	return out
}

func TestCatalogServing(t *testing.T) {
	spot := pool("spot", nil, req(capType, corev1.NodeSelectorOpIn, "spot"))
	spot.Spec.Template.Spec.Taints = []corev1.Taint{{Key: "capacity", Value: "spot", Effect: corev1.TaintEffectNoSchedule}}
	spot.Spec.Template.Spec.StartupTaints = []corev1.Taint{{Key: "cni-not-ready", Effect: corev1.TaintEffectNoSchedule}}
	sized := pool("sized", map[string]string{"nodesize": "spot4vcpu16gb"}, req(capType, corev1.NodeSelectorOpIn, "spot"))
	sized.Spec.Template.Spec.Taints = []corev1.Taint{{Key: "team", Value: "ml", Effect: corev1.TaintEffectNoSchedule}}
	broken := pool("broken", nil, req(capType, corev1.NodeSelectorOpIn, "spot"))
	broken.Status.Conditions = []status.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "NodeClassNotReady"}}
	fresh := pool("fresh", nil, req(capType, corev1.NodeSelectorOpIn, "on-demand"))
	fresh.Status.Conditions = []status.Condition{{Type: "Ready", Status: metav1.ConditionUnknown}}

	cordoned := node("n-cordoned", true, map[string]string{"nodesize": "spot4vcpu16gb"})
	cordoned.Spec.Unschedulable = true
	kube := kubefake.NewClientset(
		node("n-pool", true, map[string]string{capType: "spot", karpv1.NodePoolLabelKey: "spot"}),
		node("n-legacy", true, map[string]string{capType: "spot", karpv1.NodePoolLabelKey: "legacy"}),
		node("n-self", true, map[string]string{"nodesize": "spot4vcpu16gb"}),
		node("n-notready", false, map[string]string{"nodesize": "spot4vcpu16gb"}),
		cordoned,
		node("n-group", true, map[string]string{"nodesize": "spot4vcpu16gb", nodegroups.LabelNodeGroup: "spot-4vcpu"}),
	)
	kube.Resources = []*metav1.APIResourceList{{GroupVersion: nodePoolGroupVersion, APIResources: []metav1.APIResource{{Name: "nodepools", Kind: "NodePool"}}}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{nodePoolGVR(): "NodePoolList"},
		unstructuredPool(t, spot), unstructuredPool(t, sized), unstructuredPool(t, broken), unstructuredPool(t, fresh))
	groups := &fakeGroups{groups: []nodegroups.Group{
		{Name: "spot-4vcpu", Status: "ACTIVE", CapacityType: "SPOT",
			Labels: map[string]string{"nodesize": "spot4vcpu16gb", nodegroups.LabelNodeGroup: "spot-4vcpu", nodegroups.LabelCapacityType: "SPOT"},
			Taints: []corev1.Taint{{Key: "capacity", Value: "spot", Effect: corev1.TaintEffectNoSchedule}, {Key: "eks", Effect: corev1.TaintEffectNoExecute}}},
		{Name: "going", Status: "DELETING",
			Labels: map[string]string{"nodesize": "spot4vcpu16gb", nodegroups.LabelNodeGroup: "going", nodegroups.LabelCapacityType: "SPOT"}},
	}}

	c, err := NewCatalog(Options{Kube: kube, Dynamic: dyn, NodeGroups: groups})
	if err != nil {
		t.Fatal(err)
	}
	if c.HasSynced() {
		t.Fatal("synced before Run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "catalog sync", c.HasSynced)

	cases := []struct {
		term map[string]string
		want []string
	}{
		{term(capType, "spot"), []string{"NodePool/sized", "NodePool/spot", "Node/n-legacy"}},
		{term(capType, "on-demand"), []string{"NodePool/fresh"}},
		{term("nodesize", "spot4vcpu16gb"), []string{"NodePool/sized", "NodeGroup/spot-4vcpu", "Node/n-self"}},
		{term("nodesize", "spot4vcpu16gb", capType, "spot"), []string{"NodePool/sized"}},
		{term(nodegroups.LabelCapacityType, "SPOT"), []string{"NodeGroup/spot-4vcpu"}},
		{term("nodesize", "spot4vcpu16gbb"), []string{}},
	}
	for _, tc := range cases {
		if got := names(c.Serving(tc.term)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Serving(%v) = %v, want %v", tc.term, got, tc.want)
		}
	}

	// LaunchView: the pools serving a term, usable or not (broken is not Ready).
	if v := c.LaunchView(term(capType, "spot")); !v.Watching || len(v.Pools) != 3 || v.Pools[0].Name != "broken" || v.NodeGroups != 0 || v.Nodes != 0 {
		t.Errorf("LaunchView(spot) = %+v, want broken, sized, spot", v)
	}

	// Architectures: the spot pools and n-legacy leave it open (both); nothing serves
	// the typo; a term pinning arm64 gets arm64.
	for _, tc := range []struct {
		term map[string]string
		want []string
	}{
		{term(capType, "spot"), knownArchitectures},
		{term("nodesize", "spot4vcpu16gbb"), nil},
		{term(capType, "spot", corev1.LabelArchStable, "arm64"), []string{"arm64"}},
	} {
		if got := c.Architectures(tc.term); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Architectures(%v) = %v, want %v", tc.term, got, tc.want)
		}
	}

	tols := TolerationsFor(c.Serving(term("nodesize", "spot4vcpu16gb")))
	wantTols := []corev1.Toleration{
		{Key: "team", Operator: corev1.TolerationOpEqual, Value: "ml", Effect: corev1.TaintEffectNoSchedule},
		{Key: "capacity", Operator: corev1.TolerationOpEqual, Value: "spot", Effect: corev1.TaintEffectNoSchedule},
		{Key: "eks", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	}
	if !reflect.DeepEqual(tols, wantTols) {
		t.Errorf("tolerations = %+v, want %+v", tols, wantTols)
	}
	for _, s := range c.Serving(term(capType, "spot")) {
		for _, tt := range s.Taints {
			if tt.Key == "cni-not-ready" {
				t.Errorf("startup taint reported for %s", s)
			}
		}
	}

	// The cache holds slim nodes.
	for _, obj := range c.nodes.GetStore().List() {
		n := obj.(*corev1.Node)
		if len(n.Status.Images) != 0 || len(n.Status.Conditions) > 1 {
			t.Fatalf("node %s not slimmed: %+v", n.Name, n.Status)
		}
	}

	// A NodePool created later is picked up through the watch.
	late := pool("late", map[string]string{"nodesize": "late"})
	if _, err := dyn.Resource(nodePoolGVR()).Create(ctx, unstructuredPool(t, late), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new NodePool", func() bool { return len(c.Serving(term("nodesize", "late"))) == 1 })
	var pools []string
	for _, np := range c.nodePools() {
		pools = append(pools, np.Name)
	}
	if want := []string{"broken", "fresh", "late", "sized", "spot"}; !reflect.DeepEqual(pools, want) {
		t.Errorf("nodePools() = %v, want %v", pools, want)
	}
}

func TestCatalogWithoutNodePoolAPI(t *testing.T) {
	kube := kubefake.NewClientset(node("n1", true, map[string]string{"nodesize": "a"}))
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{nodePoolGVR(): "NodePoolList"})
	c, err := NewCatalog(Options{Kube: kube, Dynamic: dyn, DiscoveryInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "sync without the NodePool API", c.HasSynced)
	if got := names(c.Serving(term("nodesize", "a"))); !reflect.DeepEqual(got, []string{"Node/n1"}) {
		t.Fatalf("Serving = %v", got)
	}
	if v := c.LaunchView(term("nodesize", "a")); v.Watching {
		t.Errorf("LaunchView without the NodePool API = %+v, want not watching", v)
	}
}

func TestNewCatalogNeedsKube(t *testing.T) {
	if _, err := NewCatalog(Options{}); err == nil {
		t.Fatal("no Kubernetes client accepted")
	}
}

func TestNodePoolUsable(t *testing.T) {
	np := pool("p", nil)
	if !nodePoolUsable(np) {
		t.Error("pool without status not usable")
	}
	np.Status.Conditions = []status.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}
	if !nodePoolUsable(np) {
		t.Error("Ready pool not usable")
	}
	np.Status.Conditions[0].Status = metav1.ConditionFalse
	if nodePoolUsable(np) {
		t.Error("not-Ready pool usable")
	}
	np = pool("p", nil)
	now := metav1.Now()
	np.DeletionTimestamp = &now
	if nodePoolUsable(np) {
		t.Error("deleting pool usable")
	}
}

// A NodePool as users write it converts to the typed API, durations
// included.
func TestToNodePoolFromManifest(t *testing.T) {
	manifest := `
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: spot
  managedFields: [{manager: kubectl}]
spec:
  template:
    metadata:
      labels: {nodesize: spot4vcpu16gb}
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      expireAfter: Never
      requirements:
      - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
      - {key: karpenter.kwok.sh/instance-cpu, operator: Gte, values: ["4"], minValues: 1}
      taints:
      - {key: capacity, value: spot, effect: NoSchedule}
  disruption:
    consolidateAfter: 30s
    budgets: [{nodes: "10%"}]
  limits: {cpu: "1000"}
`
	m := map[string]interface{}{}
	if err := yaml.Unmarshal([]byte(manifest), &m); err != nil {
		t.Fatal(err)
	}
	obj, err := toNodePool(&unstructured.Unstructured{Object: m})
	if err != nil {
		t.Fatal(err)
	}
	np := obj.(*karpv1.NodePool)
	if np.Name != "spot" || np.ManagedFields != nil || len(np.Spec.Template.Spec.Taints) != 1 ||
		np.Spec.Disruption.ConsolidateAfter.Duration == nil || *np.Spec.Disruption.ConsolidateAfter.Duration != 30*time.Second {
		t.Fatalf("converted pool: %+v", np)
	}
	m1 := NewMatcher()
	if err := m1.NodePool(np, term("karpenter.kwok.sh/instance-cpu", "8", "nodesize", "spot4vcpu16gb", capType, "spot")); err != nil {
		t.Fatal(err)
	}
	if err := m1.NodePool(np, term("karpenter.kwok.sh/instance-cpu", "2")); err == nil {
		t.Fatal("instance-cpu 2 served by a Gte 4 pool")
	}
	if _, err := toNodePool(&unstructured.Unstructured{Object: map[string]interface{}{"spec": "not an object"}}); err == nil {
		t.Fatal("malformed NodePool converted")
	}
}
