package report

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// reservedNode is a reserved node of reservation id, of cpu, memory and maxPods.
func reservedNode(name, id, arch, cpu, mem, maxPods string) *corev1.Node {
	n := pricedNode(name, "reserved", "m5.xlarge", "z-a", cpu, mem)
	n.Labels[strategy.ReservationIDLabel], n.Labels[corev1.LabelArchStable] = id, arch
	n.Status.Allocatable[corev1.ResourcePods] = resource.MustParse(maxPods)
	return n
}

// idleFixture is a workload of strat whose 3 pods (cpu each) run one on the reserved
// node res-room and two on on-demand nodes, beside reserved nodes: res-room (4 CPUs,
// 1.5 used), res-full (4 CPUs, 3.5 used), res-arm (arm64, empty), res-cb (a
// Capacity Block's, 2 CPUs, empty), and two empty nodes that take no new pods: one
// cordoned, one Karpenter is disrupting.
func idleFixture(strat, cpu string) *State {
	pods := []corev1.Pod{
		withRequests(placedPod("p1", "rs", 1, "reserved", corev1.PodRunning, "res-room"), cpu, "0"),
		withRequests(placedPod("p2", "rs", 2, "on-demand", corev1.PodRunning, "od1"), cpu, "0"),
		withRequests(placedPod("p3", "rs", 3, "on-demand", corev1.PodRunning, "od2"), cpu, "0"),
	}
	nodes := map[string]*corev1.Node{
		"od1":           pricedNode("od1", "on-demand", "m5.xlarge", "z-a", "4", "16Gi"),
		"od2":           pricedNode("od2", "on-demand", "m5.xlarge", "z-a", "4", "16Gi"),
		"res-room":      reservedNode("res-room", "cr-1", "amd64", "4", "16Gi", "110"),
		"res-full":      reservedNode("res-full", "cr-1", "amd64", "4", "16Gi", "110"),
		"res-arm":       reservedNode("res-arm", "cr-2", "arm64", "4", "16Gi", "110"),
		"res-cb":        reservedNode("res-cb", "cr-3", "amd64", "2", "8Gi", "4"),
		"res-cordoned":  reservedNode("res-cordoned", "cr-4", "amd64", "4", "16Gi", "110"),
		"res-disrupted": reservedNode("res-disrupted", "cr-5", "amd64", "4", "16Gi", "110"),
	}
	nodes["res-cordoned"].Spec.Unschedulable = true
	nodes["res-disrupted"].Spec.Taints = []corev1.Taint{karpv1.DisruptedNoScheduleTaint}
	for i := range pods {
		pods[i].Annotations[strategy.AnnotationTerm] = "1" // its selector is not the term's
	}
	st := deploymentState(strat, 3, pods, nodes)
	st.Used = map[string]NodeUse{
		"res-room":     {CPUMilli: 1500, MemoryBytes: 1 << 30, Pods: 2},
		"res-full":     {CPUMilli: 3500, Pods: 5},
		"res-arm":      {},
		"res-cb":       {Pods: 1},
		"res-cordoned": {}, "res-disrupted": {},
	}
	return st
}

func TestIdleReservedBesideOnDemandPods(t *testing.T) {
	const amd64 = ",kubernetes.io/arch=amd64"
	cases := []struct {
		name, strat, cpu        string
		acceptsSetting          bool
		want                    int
		reservations            []string
		accepts                 bool
		hint                    string
		notHint                 string
		onDemandPodsWithoutIdle bool
	}{
		// 2.5 CPUs free on res-room, 0.5 on res-full, 2 on res-cb; arm64 is not the term's.
		{name: "a term that accepts reserved", strat: "karpenter.sh/capacity-type=reserved|on-demand" + amd64, cpu: "1",
			want: 2 + 0 + 2, reservations: []string{"cr-1", "cr-3"}, accepts: true, hint: "only as it launches"},
		{name: "a plain on-demand term", strat: "karpenter.sh/capacity-type=on-demand" + amd64, cpu: "1",
			want: 4, reservations: []string{"cr-1", "cr-3"}, hint: "ON_DEMAND_ACCEPTS_RESERVED=on"},
		{name: "an on-demand term, ON_DEMAND_ACCEPTS_RESERVED=on", strat: "karpenter.sh/capacity-type=on-demand" + amd64, cpu: "1", acceptsSetting: true,
			want: 4, reservations: []string{"cr-1", "cr-3"}, accepts: true, hint: "only as it launches"},
		{name: "a set without reserved", strat: "karpenter.sh/capacity-type=spot|on-demand" + amd64, cpu: "1",
			want: 4, reservations: []string{"cr-1", "cr-3"}, hint: "add reserved to its set", notHint: "ON_DEMAND_ACCEPTS_RESERVED"},
		// No arch label: the arm64 node's room counts too.
		{name: "a term without capacity type", strat: "node.kubernetes.io/instance-type=m5.xlarge", cpu: "1",
			want: 2 + 4 + 2, reservations: []string{"cr-1", "cr-2", "cr-3"}, accepts: true},
		// Pods that request nothing are bound by the nodes' pod limit (res-full: 110-5).
		{name: "pods without requests", strat: "karpenter.sh/capacity-type=reserved|on-demand" + amd64, cpu: "0",
			want: 108 + 105 + 3, reservations: []string{"cr-1", "cr-3"}, accepts: true},
		// 3 CPUs: nothing fits anywhere.
		{name: "no room for such a pod", strat: "karpenter.sh/capacity-type=reserved|on-demand" + amd64, cpu: "3", onDemandPodsWithoutIdle: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := idleFixture(c.strat, c.cpu)
			st.OnDemandAcceptsReserved = c.acceptsSetting
			term := Build(st, nil2all).Workloads[0].Terms[0]
			idle := term.IdleReserved
			if c.onDemandPodsWithoutIdle {
				if idle != nil {
					t.Fatalf("idle reserved %+v, want none", idle)
				}
				return
			}
			if idle == nil {
				t.Fatalf("no idle reserved capacity on term %+v", term)
			}
			if idle.Pods != c.want || idle.OnDemandPods != 2 || !slices.Equal(idle.Reservations, c.reservations) || idle.AcceptsReserved != c.accepts {
				t.Errorf("idle reserved %+v, want %d pods beside 2 on-demand ones in %v, accepts reserved %v", idle, c.want, c.reservations, c.accepts)
			}
			if !strings.Contains(idle.Hint, c.hint) || c.notHint != "" && strings.Contains(idle.Hint, c.notHint) {
				t.Errorf("hint %q, want %q in it and not %q", idle.Hint, c.hint, c.notHint)
			}
		})
	}
}

// No idle reserved capacity is reported for a term with no pod on on-demand, a term
// pinned to spot, or when the reserved nodes' use was not read.
func TestIdleReservedNotReported(t *testing.T) {
	st := idleFixture("karpenter.sh/capacity-type=reserved|on-demand", "1")
	st.Used = nil
	if idle := Build(st, nil2all).Workloads[0].Terms[0].IdleReserved; idle != nil {
		t.Errorf("use not read: idle reserved %+v", idle)
	}
	st = idleFixture("karpenter.sh/capacity-type=spot", "1")
	if idle := Build(st, nil2all).Workloads[0].Terms[0].IdleReserved; idle != nil {
		t.Errorf("spot term: idle reserved %+v", idle)
	}
	st = idleFixture("karpenter.sh/capacity-type=reserved|on-demand", "1")
	st.Pods = st.Pods[:1]
	if idle := Build(st, nil2all).Workloads[0].Terms[0].IdleReserved; idle != nil {
		t.Errorf("no on-demand pod: idle reserved %+v", idle)
	}
}

// ReadReservedUse sums what the pods bound to each reserved node request, and reads no
// other node's pods.
func TestReadReservedUse(t *testing.T) {
	nodes := map[string]*corev1.Node{
		"res": reservedNode("res", "cr-1", "amd64", "4", "16Gi", "110"),
		"od":  pricedNode("od", "on-demand", "m5.xlarge", "z-a", "4", "16Gi"),
	}
	a := withRequests(placedPod("a", "rs", 1, "", corev1.PodRunning, "res"), "1", "1Gi")
	b := withRequests(placedPod("b", "rs", 2, "", corev1.PodRunning, "res"), "500m", "0")
	client := fake.NewClientset(&a, &b)
	var selectors []string
	client.PrependReactor("list", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		selectors = append(selectors, action.(k8stesting.ListAction).GetListRestrictions().Fields.String())
		return false, nil, nil
	})
	use, err := ReadReservedUse(context.Background(), client, nodes)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := use["res"], (NodeUse{CPUMilli: 1500, MemoryBytes: 1 << 30, Pods: 2}); got != want || len(use) != 1 {
		t.Errorf("use %+v, want res %+v only", use, want)
	}
	if len(selectors) != 1 || !strings.Contains(selectors[0], "spec.nodeName=res") {
		t.Errorf("pods listed with field selectors %q, want one list of node res", selectors)
	}
}

// A user who may not list nodes, or not every namespace's pods, is told the report
// shows no idle reserved capacity.
func TestCollectSaysIdleReservedIsUnseen(t *testing.T) {
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		v1alpha1.PlacementPolicies:        "PlacementPolicyList",
		v1alpha1.ClusterPlacementPolicies: "ClusterPlacementPolicyList",
	})
	forbid := func(resource string, cluster bool) *fake.Clientset {
		client := fake.NewClientset(reservedNode("res", "cr-1", "amd64", "4", "16Gi", "110"))
		client.PrependReactor("list", resource, func(action k8stesting.Action) (bool, runtime.Object, error) {
			if cluster && action.GetNamespace() != metav1.NamespaceAll {
				return false, nil, nil
			}
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "", nil)
		})
		return client
	}
	for resource, want := range map[string]string{"nodes": "no idle reserved capacity", "pods": "pods on reserved nodes (not allowed"} {
		r, err := Collect(context.Background(), forbid(resource, resource == "pods"), dyn, Options{Namespace: "demo", WebhookNamespace: "cksw", SkipServing: true})
		if err != nil {
			t.Fatalf("%s forbidden: %v", resource, err)
		}
		if !strings.Contains(strings.Join(r.Unseen, "\n"), want) {
			t.Errorf("%s forbidden: unseen %q lacks %q", resource, r.Unseen, want)
		}
	}
}
