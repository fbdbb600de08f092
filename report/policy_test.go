package report

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// TestBuildNamesTheStrategySource: workloads without a strategy of their own are
// reported with their policy's or namespace default's, and say which.
func TestBuildNamesTheStrategySource(t *testing.T) {
	dep := func(name string, ann map[string]string) appsv1.Deployment {
		return appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo", Labels: map[string]string{"app": name}, Annotations: ann},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)}}
	}
	pol := v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web-split"},
		Spec: v1alpha1.PlacementPolicySpec{Strategy: reportStrategy, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	ns := corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo", Annotations: map[string]string{strategy.AnnotationStrategy: "capacity=spot"}}}
	st := &State{
		Deployments: []appsv1.Deployment{dep("web", nil), dep("api", nil), dep("own", map[string]string{strategy.AnnotationStrategy: reportStrategy})},
		Policies:    policy.NewIndex([]v1alpha1.PlacementPolicy{pol}, nil, []corev1.Namespace{ns}),
	}
	got := map[string]string{}
	for _, w := range Build(st, func(string, string) bool { return true }).Workloads {
		got[w.Name] = w.Source + " | " + w.Strategy
	}
	want := map[string]string{
		"web": "PlacementPolicy demo/web-split | " + reportStrategy,
		"api": "Namespace demo | capacity=spot",
		"own": "Deployment demo/own | " + reportStrategy,
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %q, want %q", name, got[name], w)
		}
	}
}

// TestBuildReportsAudit: a policy in audit mode is named with what it would move, beside
// the strategy that applies now; a workload only it would govern is reported in state
// audit, exact (nothing is off while nothing places it), every pod to move.
func TestBuildReportsAudit(t *testing.T) {
	dep := func(name string) appsv1.Deployment {
		return appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo", UID: "d-" + types.UID(name), Labels: map[string]string{"app": name}},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)}}
	}
	rs := appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "demo", UID: "rs-web",
		Annotations:     map[string]string{"deployment.kubernetes.io/revision": "1"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "Deployment", Name: "web", UID: "d-web", Controller: ptr.To(true)}}}}
	pod := func(name string, seat, term int, capacity string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo",
			Annotations:     map[string]string{strategy.AnnotationSeat: fmt.Sprint(seat), strategy.AnnotationTerm: fmt.Sprint(term)},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-1", UID: "rs-web", Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{NodeSelector: map[string]string{"capacity": capacity}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	audit := v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "next"},
		Spec: v1alpha1.PlacementPolicySpec{Strategy: "capacity=spot,base=2:capacity=od", Mode: v1alpha1.ModeAudit}}
	ns := corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}
	st := &State{
		Deployments: []appsv1.Deployment{dep("api")},
		ReplicaSets: []appsv1.ReplicaSet{rs},
		Pods:        []corev1.Pod{pod("web-a", 1, 1, "od"), pod("web-b", 2, 2, "spot")},
		Policies:    policy.NewIndex([]v1alpha1.PlacementPolicy{audit}, nil, []corev1.Namespace{ns}),
	}
	// web is governed by the namespace default now (enforced), the audited policy over it.
	ns.Annotations = map[string]string{strategy.AnnotationStrategy: "capacity=od,base=1:capacity=spot"}
	st.Policies = policy.NewIndex([]v1alpha1.PlacementPolicy{audit}, nil, []corev1.Namespace{ns})
	st.Deployments = append(st.Deployments, dep("web"))
	got := map[string]WorkloadReport{}
	for _, w := range Build(st, func(string, string) bool { return true }).Workloads {
		got[w.Name] = w
	}
	w := got["web"]
	if w.Source != "Namespace demo" || w.Audit == nil || w.Audit.Source != "PlacementPolicy demo/next" || w.Audit.WouldMove != 1 {
		t.Errorf("web: source %q, audit %+v; want the namespace default, and the audited policy moving the on-demand pod", w.Source, w.Audit)
	}
	if !w.Exact {
		t.Errorf("web: %s (%s), want exact on the strategy that applies now", w.State, w.Why)
	}
	a := got["api"]
	if a.Source != "Namespace demo" || a.Audit == nil || a.Audit.WouldMove != 2 {
		t.Errorf("api: %+v", a)
	}
	// Without the namespace default, api is governed by nothing but the audit.
	st.Policies = policy.NewIndex([]v1alpha1.PlacementPolicy{audit}, nil, nil)
	for _, w := range Build(st, func(string, string) bool { return true }).Workloads {
		if w.Name == "api" && (w.State != StateAudit || !w.Exact || w.Audit == nil || w.Audit.WouldMove != 2 || w.Source != "") {
			t.Errorf("api under the audit alone: %+v", w)
		}
	}
	// A namespace default in audit mode has no status object: spread says what it would do.
	ns.Annotations[v1alpha1.AnnotationMode] = "Audit"
	st.Policies = policy.NewIndex(nil, nil, []corev1.Namespace{ns})
	got = map[string]WorkloadReport{}
	for _, w := range Build(st, func(string, string) bool { return true }).Workloads {
		got[w.Name] = w
	}
	if w := got["api"]; w.State != StateAudit || w.Audit == nil || w.Audit.Source != "Namespace demo" || w.Audit.WouldMove != 2 {
		t.Errorf("api under an audited namespace default: %+v", w)
	}
	if w := got["web"]; w.State != StateAudit || w.Audit == nil || w.Audit.WouldMove != 0 {
		t.Errorf("web under an audited namespace default (its pods already on its target): %+v", w)
	}
	// The pod the audited policy would move carries karpenter.sh/do-not-disrupt: the loop
	// never moves it, so it is not counted.
	enforced := corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo", Annotations: map[string]string{strategy.AnnotationStrategy: "capacity=od,base=1:capacity=spot"}}}
	st.Policies = policy.NewIndex([]v1alpha1.PlacementPolicy{audit}, nil, []corev1.Namespace{enforced})
	st.Pods[0].Annotations[karpv1.DoNotDisruptAnnotationKey] = "true"
	for _, w := range Build(st, func(string, string) bool { return true }).Workloads {
		if w.Name == "web" && (w.Audit == nil || w.Audit.WouldMove != 0) {
			t.Errorf("web with its on-demand pod not to be disrupted: audit %+v, want 0 moves", w.Audit)
		}
	}
}
