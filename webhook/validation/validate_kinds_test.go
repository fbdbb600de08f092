package validation

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
)

// kindRequest is a CREATE (or, with old, UPDATE) of group/kind shop/web whose object
// is obj.
func kindRequest(t *testing.T, group, kind string, obj, old map[string]any) *admissionv1.AdmissionRequest {
	t.Helper()
	encode := func(o map[string]any) []byte {
		raw, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	req := &admissionv1.AdmissionRequest{
		UID: "u", Kind: metav1.GroupVersionKind{Group: group, Version: "v1", Kind: kind},
		Namespace: testNS, Name: "web", Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: encode(obj)},
	}
	if old != nil {
		req.Operation, req.OldObject = admissionv1.Update, runtime.RawExtension{Raw: encode(old)}
	}
	return req
}

// withAnnotations is metadata (and optionally spec) for kindRequest.
func withAnnotations(ann map[string]string, spec map[string]any) map[string]any {
	meta := map[string]any{"name": "web", "namespace": testNS}
	if ann != nil {
		meta["annotations"] = ann
	}
	return map[string]any{"metadata": meta, "spec": spec}
}

func podTemplateWith(ann map[string]string) map[string]any {
	return map[string]any{"metadata": map[string]any{"annotations": ann}, "spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "busybox"}}}}
}

// An Argo Rollout's strategy is validated as a Deployment's: refused at apply, on the
// Rollout or its pod template; a Rollout with spec.workloadRef has no template to check.
func TestRolloutValidation(t *testing.T) {
	bad := map[string]string{strategy.AnnotationStrategy: "spot=1,weight=x"}
	good := map[string]string{strategy.AnnotationStrategy: burstStrategy}
	v := &WorkloadValidator{Metrics: webhook.NewMetrics(), Log: quietLog()}
	ctx := context.Background()
	const argo = "argoproj.io"

	resp := v.Admit(ctx, kindRequest(t, argo, "Rollout", withAnnotations(bad, map[string]any{"template": podTemplateWith(nil)}), nil))
	if resp.Allowed || !strings.Contains(resp.Result.Message, `CustomPodScheduleStrategy on Rollout shop/web is invalid: term 1 ("spot=1,weight=x"): weight "x"`) {
		t.Errorf("invalid strategy on a Rollout: want refused naming the Rollout, got %+v", resp.Result)
	}
	resp = v.Admit(ctx, kindRequest(t, argo, "Rollout", withAnnotations(nil, map[string]any{"template": podTemplateWith(bad)}), nil))
	if resp.Allowed || !strings.Contains(resp.Result.Message, "the pod template of Rollout shop/web is invalid") {
		t.Errorf("invalid strategy in a Rollout's pod template: want refused, got %+v", resp.Result)
	}
	resp = v.Admit(ctx, kindRequest(t, argo, "Rollout", withAnnotations(bad, map[string]any{"workloadRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}), nil))
	if resp.Allowed {
		t.Errorf("invalid strategy on a Rollout with a workloadRef: want refused, got %+v", resp)
	}
	resp = v.Admit(ctx, kindRequest(t, argo, "Rollout", withAnnotations(good, map[string]any{"workloadRef": map[string]any{"kind": "Deployment", "name": "web"}}), nil))
	if !resp.Allowed || len(resp.Warnings) != 0 {
		t.Errorf("valid strategy on a Rollout with a workloadRef: %+v", resp)
	}
	// Ratchet, as for a Deployment: an UPDATE keeping the broken value only warns.
	same := withAnnotations(bad, map[string]any{"template": podTemplateWith(nil)})
	resp = v.Admit(ctx, kindRequest(t, argo, "Rollout", same, same))
	if !resp.Allowed || len(resp.Warnings) != 1 {
		t.Errorf("an UPDATE keeping a Rollout's invalid strategy: want a warning, got %+v", resp)
	}
	// Another group's kind Rollout is not Argo's.
	if resp := v.Admit(ctx, kindRequest(t, "example.com", "Rollout", withAnnotations(bad, nil), nil)); !resp.Allowed || len(resp.Warnings) != 0 {
		t.Errorf("kind Rollout of another group: want a plain admission, got %+v", resp)
	}
}

// A Job or CronJob carrying a strategy is checked: admitted, with a warning when the
// strategy is invalid (never refused: its controller could not act on it); a valid one
// or none gets no warning.
func TestJobStrategiesAreChecked(t *testing.T) {
	good := map[string]string{strategy.AnnotationStrategy: burstStrategy}
	bad := map[string]string{strategy.AnnotationStrategyAlias: "spot=1,weight=x"}
	v := &WorkloadValidator{Metrics: webhook.NewMetrics(), Log: quietLog()}
	ctx := context.Background()
	for name, c := range map[string]struct {
		kind string
		obj  map[string]any
		want string // "": no warning
	}{
		"Job": {"Job", withAnnotations(good, map[string]any{"template": podTemplateWith(nil)}), ""},
		"Job, invalid, on the pod template": {"Job", withAnnotations(nil, map[string]any{"template": podTemplateWith(bad)}),
			"on the pod template of Job shop/web is invalid, its pods will not be placed"},
		"CronJob":                      {"CronJob", withAnnotations(good, map[string]any{"jobTemplate": map[string]any{"spec": map[string]any{"template": podTemplateWith(nil)}}}), ""},
		"CronJob, on the job template": {"CronJob", withAnnotations(nil, map[string]any{"jobTemplate": map[string]any{"metadata": map[string]any{"annotations": good}}}), ""},
		"CronJob, invalid, on the pod template": {"CronJob", withAnnotations(nil, map[string]any{"jobTemplate": map[string]any{"spec": map[string]any{"template": podTemplateWith(bad)}}}),
			"on the pod template of CronJob shop/web is invalid"},
	} {
		resp := v.Admit(ctx, kindRequest(t, "batch", c.kind, c.obj, nil))
		switch {
		case !resp.Allowed:
			t.Errorf("%s: refused: %+v", name, resp)
		case c.want == "" && len(resp.Warnings) != 0:
			t.Errorf("%s: want no warning, got %q", name, resp.Warnings)
		case c.want != "" && (len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], c.want)):
			t.Errorf("%s: want one warning %q, got %q", name, c.want, resp.Warnings)
		}
		// In a namespace not enabled, its pods are not sent: that is what is said.
		if resp := v.AdmitNotEnabled(ctx, kindRequest(t, "batch", c.kind, c.obj, nil)); !resp.Allowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "is not enabled") {
			t.Errorf("%s in a namespace not enabled: want one warning naming the label, got %+v", name, resp)
		}
	}
	scheduled := withAnnotations(bad, map[string]any{"template": podTemplateWith(nil)})
	scheduled["metadata"].(map[string]any)["ownerReferences"] = []any{map[string]any{"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "uid": "c1", "controller": true}}
	if resp := v.Admit(ctx, kindRequest(t, "batch", "Job", scheduled, nil)); !resp.Allowed || len(resp.Warnings) != 0 {
		t.Errorf("a CronJob's Job (its CronJob was checked at apply): want a plain admission, got %+v", resp)
	}
	off := map[string]string{strategy.AnnotationStrategy: burstStrategy, strategy.AnnotationOptIn: "false"}
	for name, obj := range map[string]map[string]any{
		"no strategy":  withAnnotations(nil, map[string]any{"template": podTemplateWith(nil)}),
		"switched off": withAnnotations(off, nil),
	} {
		if resp := v.Admit(ctx, kindRequest(t, "batch", "Job", obj, nil)); !resp.Allowed || len(resp.Warnings) != 0 {
			t.Errorf("Job, %s: want a plain admission, got %+v", name, resp)
		}
	}
}
