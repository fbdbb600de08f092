package validation

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
)

func policyRequest(t *testing.T, op admissionv1.Operation, kind, strat, oldStrat string) *admissionv1.AdmissionRequest {
	t.Helper()
	encode := func(s string) []byte {
		obj := map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": kind,
			"metadata": map[string]any{"name": "split"}, "spec": map[string]any{"strategy": s}}
		if kind == v1alpha1.KindPlacementPolicy {
			obj["metadata"].(map[string]any)["namespace"] = testNS
		}
		raw, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	req := &admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Group: v1alpha1.Group, Version: v1alpha1.Version, Kind: kind},
		Name: "split", Operation: op, Object: runtime.RawExtension{Raw: encode(strat)}}
	if oldStrat != "" {
		req.OldObject = runtime.RawExtension{Raw: encode(oldStrat)}
	}
	return req
}

func namespaceRequest(t *testing.T, op admissionv1.Operation, strat, oldStrat string) *admissionv1.AdmissionRequest {
	t.Helper()
	encode := func(s string) []byte {
		ns := corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}
		if s != "" {
			ns.Annotations = map[string]string{strategy.AnnotationStrategy: s}
		}
		raw, err := json.Marshal(ns)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	req := &admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Namespace"},
		Name: testNS, Operation: op, Object: runtime.RawExtension{Raw: encode(strat)}}
	if oldStrat != "" {
		req.OldObject = runtime.RawExtension{Raw: encode(oldStrat)}
	}
	return req
}

// TestPolicyValidation: policies and namespace defaults get the annotation's grammar
// and message at apply; WarnOnly and an unchanged fault only warn.
func TestPolicyValidation(t *testing.T) {
	const bad = "spot=1,weight=x"
	const grammar = `term 1 ("spot=1,weight=x"): weight "x" is not a non-negative integer`
	v := &WorkloadValidator{Metrics: webhook.NewMetrics(), Log: quietLog()}
	warn := &WorkloadValidator{WarnOnly: true, Metrics: webhook.NewMetrics(), Log: quietLog()}
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		v         *WorkloadValidator
		req       *admissionv1.AdmissionRequest
		allowed   bool
		mentions  string
		nWarnings int
	}{
		{"invalid PlacementPolicy", v, policyRequest(t, admissionv1.Create, v1alpha1.KindPlacementPolicy, bad, ""), false, "spec.strategy of PlacementPolicy shop/split is invalid: " + grammar, 0},
		{"invalid ClusterPlacementPolicy", v, policyRequest(t, admissionv1.Create, v1alpha1.KindClusterPlacementPolicy, bad, ""), false, "ClusterPlacementPolicy split", 0},
		{"valid policy", v, policyRequest(t, admissionv1.Create, v1alpha1.KindPlacementPolicy, burstStrategy, ""), true, "", 0},
		{"policy update introducing a fault", v, policyRequest(t, admissionv1.Update, v1alpha1.KindPlacementPolicy, bad, burstStrategy), false, grammar, 0},
		{"policy update keeping a fault", v, policyRequest(t, admissionv1.Update, v1alpha1.KindPlacementPolicy, bad, bad), true, grammar, 1},
		{"warn only", warn, policyRequest(t, admissionv1.Create, v1alpha1.KindPlacementPolicy, bad, ""), true, grammar, 1},
		{"invalid namespace default", v, namespaceRequest(t, admissionv1.Create, bad, ""), false, "CustomPodScheduleStrategy on Namespace shop is invalid: " + grammar, 0},
		{"namespace without a default", v, namespaceRequest(t, admissionv1.Create, "", ""), true, "", 0},
		{"namespace update keeping a fault", v, namespaceRequest(t, admissionv1.Update, bad, bad), true, grammar, 1},
		{"namespace default, warn only", warn, namespaceRequest(t, admissionv1.Create, bad, ""), true, grammar, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := tc.v.Admit(ctx, tc.req)
			if resp.Allowed != tc.allowed || len(resp.Warnings) != tc.nWarnings {
				t.Fatalf("allowed %v with warnings %q, want %v with %d: %+v", resp.Allowed, resp.Warnings, tc.allowed, tc.nWarnings, resp.Result)
			}
			text := strings.Join(resp.Warnings, "\n")
			if resp.Result != nil {
				text += resp.Result.Message
			}
			if !strings.Contains(text, tc.mentions) {
				t.Fatalf("answer %q does not say %q", text, tc.mentions)
			}
		})
	}
	req := policyRequest(t, admissionv1.Create, v1alpha1.KindPlacementPolicy, "a=1", "")
	req.Object.Raw = []byte(`{"kind":"PlacementPolicy","metadata":{"name":"x","namespace":"shop"},"spec":{"strategy":"a=1","selector":{"matchExpressions":[{"key":"app","operator":"Near"}]}}}`)
	if resp := v.Admit(ctx, req); resp.Allowed || !strings.Contains(resp.Result.Message, "spec.selector") {
		t.Fatalf("a selector that does not parse: %+v", resp)
	}
}
