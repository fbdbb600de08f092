package validation

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
)

func deploymentRequest(t *testing.T, op admissionv1.Operation, meta, template map[string]string, old map[string]string) *admissionv1.AdmissionRequest {
	t.Helper()
	encode := func(ann map[string]string) []byte {
		d := appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: testNS, Annotations: ann}}
		d.Spec.Template.Annotations = template
		raw, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	req := &admissionv1.AdmissionRequest{
		UID: "u", Kind: metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
		Namespace: testNS, Name: "web", Operation: op, Object: runtime.RawExtension{Raw: encode(meta)},
	}
	if old != nil {
		req.OldObject = runtime.RawExtension{Raw: encode(old)}
	}
	return req
}

func TestWorkloadValidation(t *testing.T) {
	bad := map[string]string{strategy.AnnotationStrategy: "spot=1,weight=x"}
	good := map[string]string{strategy.AnnotationStrategy: burstStrategy}
	v := &WorkloadValidator{Metrics: webhook.NewMetrics(), Log: quietLog()}
	ctx := context.Background()

	resp := v.Admit(ctx, deploymentRequest(t, admissionv1.Create, bad, nil, nil))
	if resp.Allowed || !strings.Contains(resp.Result.Message, `term 1 ("spot=1,weight=x"): weight "x" is not a non-negative integer`) {
		t.Errorf("invalid strategy on CREATE: %+v", resp.Result)
	}
	resp = v.Admit(ctx, deploymentRequest(t, admissionv1.Create, nil, map[string]string{strategy.AnnotationStrategyAlias: "a"}, nil))
	if resp.Allowed || !strings.Contains(resp.Result.Message, "pod template of Deployment shop/web") {
		t.Errorf("invalid strategy in the pod template: %+v", resp.Result)
	}
	resp = v.Admit(ctx, deploymentRequest(t, admissionv1.Update, bad, nil, good))
	if resp.Allowed {
		t.Error("an UPDATE that introduces an invalid strategy is allowed")
	}
	resp = v.Admit(ctx, deploymentRequest(t, admissionv1.Update, bad, nil, bad))
	if !resp.Allowed || len(resp.Warnings) != 1 {
		t.Errorf("an UPDATE keeping an existing invalid strategy must warn, not block: %+v", resp)
	}
	resp = v.Admit(ctx, deploymentRequest(t, admissionv1.Create, good, nil, nil))
	if !resp.Allowed || len(resp.Warnings) != 0 {
		t.Errorf("valid strategy: %+v", resp)
	}
	resp = v.Admit(ctx, deploymentRequest(t, admissionv1.Create, map[string]string{strategy.AnnotationStrategy: "x", strategy.AnnotationOptIn: "false"}, nil, nil))
	if !resp.Allowed {
		t.Errorf("a switched-off strategy is not checked: %+v", resp)
	}

	warnOnly := &WorkloadValidator{WarnOnly: true, Metrics: webhook.NewMetrics(), Log: quietLog()}
	resp = warnOnly.Admit(ctx, deploymentRequest(t, admissionv1.Create, bad, nil, nil))
	if !resp.Allowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], `weight "x"`) {
		t.Errorf("warn mode: %+v", resp)
	}

	unserved := &WorkloadValidator{Capacity: fakeCapacity{served: false}, Metrics: webhook.NewMetrics(), Log: quietLog()}
	resp = unserved.Admit(ctx, deploymentRequest(t, admissionv1.Create, good, nil, nil))
	if !resp.Allowed || len(resp.Warnings) != 2 || !strings.Contains(resp.Warnings[1], "term 2 (karpenter.sh/capacity-type=spot)") {
		t.Errorf("unserved terms are warnings: %+v", resp.Warnings)
	}
}

// Identical terms are refused at apply time, naming both; contained terms only warn.
func TestWorkloadValidationOfOverlappingTerms(t *testing.T) {
	v := &WorkloadValidator{Metrics: webhook.NewMetrics(), Log: quietLog()}
	ctx := context.Background()
	resp := v.Admit(ctx, deploymentRequest(t, admissionv1.Create, map[string]string{strategy.AnnotationStrategy: "a=1,b=2:b=2,a=1"}, nil, nil))
	if resp.Allowed || !strings.Contains(resp.Result.Message, `term 2 ("b=2,a=1"): same node labels as term 1 (a=1,b=2)`) {
		t.Errorf("identical terms: %+v", resp.Result)
	}
	resp = v.Admit(ctx, deploymentRequest(t, admissionv1.Create, map[string]string{strategy.AnnotationStrategy: "a=1:a=1,b=2"}, nil, nil))
	if !resp.Allowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "on Deployment shop/web: term 2 (a=1,b=2) selects every label of term 1 (a=1)") {
		t.Errorf("contained terms must warn: %+v", resp)
	}
}

// Workloads of namespaces that are not enabled (scope opt-in) are admitted; one with a
// strategy, on the object or its pod template, gets a warning naming the label.
func TestAdmitNotEnabled(t *testing.T) {
	v := &WorkloadValidator{Metrics: webhook.NewMetrics(), Log: quietLog()}
	ctx := context.Background()
	good := map[string]string{strategy.AnnotationStrategy: burstStrategy}
	bad := map[string]string{strategy.AnnotationStrategy: "spot=1,weight=x"}
	for name, req := range map[string]*admissionv1.AdmissionRequest{
		"on the object":       deploymentRequest(t, admissionv1.Create, good, nil, nil),
		"on the pod template": deploymentRequest(t, admissionv1.Update, nil, good, nil),
		"invalid":             deploymentRequest(t, admissionv1.Create, bad, nil, nil),
	} {
		resp := v.AdmitNotEnabled(ctx, req)
		if !resp.Allowed || len(resp.Warnings) != 1 ||
			!strings.Contains(resp.Warnings[0], "namespace "+testNS+" is not enabled") ||
			!strings.Contains(resp.Warnings[0], strategy.LabelNamespaceEnabled+"=true") {
			t.Errorf("%s: want an admission with one warning naming the label, got %+v", name, resp)
		}
	}
	if resp := v.AdmitNotEnabled(ctx, deploymentRequest(t, admissionv1.Create, nil, nil, nil)); !resp.Allowed || len(resp.Warnings) != 0 {
		t.Errorf("no strategy: want a plain admission, got %+v", resp)
	}
}
