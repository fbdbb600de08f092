package placement

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/internal/webhooktest"
)

const testRolloutUID = types.UID("rollout-uid-1")

// rolloutCluster is a ReplicaSet "web-5c4ff85997" that Argo Rollout "web" controls,
// with no strategy of its own; rollouts are the Rollouts the API serves (none: the
// Rollout is gone).
func rolloutCluster(rollouts ...runtime.Object) *cluster {
	yes := true
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{
		Name: "web-5c4ff85997", Namespace: testNS, UID: testRSUID,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout", Name: "web", UID: testRolloutUID, Controller: &yes}},
	}}
	return &cluster{objects: []runtime.Object{rs}, rollouts: append([]runtime.Object{}, rollouts...)}
}

// A pod of a Rollout's ReplicaSet is placed by the Rollout's annotation, and Events
// about it go to the Rollout.
func TestRolloutPodPlacedByRolloutAnnotation(t *testing.T) {
	ro := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout"},
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "web", UID: testRolloutUID, Annotations: map[string]string{strategy.AnnotationStrategy: "a=1:b=2"}},
	}
	m, _, _ := rolloutCluster(ro).mutator(t)
	req := webhooktest.CreateRequest(t, webhooktest.RSPod(testNS, testRSUID))
	resp := m.Admit(context.Background(), req)
	if !resp.Allowed {
		t.Fatalf("blocked: %+v", resp.Result)
	}
	pod := applyPatch(t, req, resp)
	if pod.Spec.NodeSelector["b"] != "2" { // seat 1 of a=1:b=2 is term 2's
		t.Fatalf("not placed by the Rollout's strategy: nodeSelector %v, warnings %q", pod.Spec.NodeSelector, resp.Warnings)
	}

	// An invalid strategy on the Rollout: the Event names it and goes to it.
	ro.Annotations[strategy.AnnotationStrategy] = "nolabel"
	m, rec, _ := rolloutCluster(ro).mutator(t)
	resp = m.Admit(context.Background(), webhooktest.CreateRequest(t, webhooktest.RSPod(testNS, testRSUID)))
	if resp.Patch != nil || !strings.Contains(strings.Join(resp.Warnings, "\n"), "on Rollout shop/web is invalid") {
		t.Fatalf("patch %s, warnings %q; want unchanged, naming the Rollout", resp.Patch, resp.Warnings)
	}
	if e := <-rec.Events; !strings.Contains(e, "Rollout shop/web") {
		t.Fatalf("event %q", e)
	}
}

// A pod whose ReplicaSet's Rollout cannot be read is admitted unchanged, never
// blocked, with a warning that says why, though the pod itself names no strategy.
func TestRolloutMissingAdmitsUnplacedWithWarning(t *testing.T) {
	m, _, _ := rolloutCluster().mutator(t)
	resp := m.Admit(context.Background(), webhooktest.CreateRequest(t, webhooktest.RSPod(testNS, testRSUID)))
	if !resp.Allowed {
		t.Fatalf("blocked: %+v", resp.Result)
	}
	warnings := strings.Join(resp.Warnings, "\n")
	if resp.Patch != nil || !strings.Contains(warnings, "pod not placed: ReplicaSet shop/web-5c4ff85997 is controlled by Rollout shop/web, which cannot be read") {
		t.Fatalf("patch %s, warnings %q; want unchanged with a warning naming the Rollout", resp.Patch, warnings)
	}
}

// The pod's own strategy annotation still comes first for a Rollout's pod.
func TestRolloutPodAnnotationFirst(t *testing.T) {
	ro := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout"},
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "web", UID: testRolloutUID, Annotations: map[string]string{strategy.AnnotationStrategy: "a=1:b=2"}},
	}
	m, _, _ := rolloutCluster(ro).mutator(t)
	pod := webhooktest.RSPod(testNS, testRSUID)
	pod.Annotations = map[string]string{strategy.AnnotationStrategy: "c=3"}
	req := webhooktest.CreateRequest(t, pod)
	got := applyPatch(t, req, m.Admit(context.Background(), req))
	if got.Spec.NodeSelector["c"] != "3" {
		t.Fatalf("nodeSelector %v, want the pod's own strategy", got.Spec.NodeSelector)
	}
}
