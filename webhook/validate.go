package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/sirupsen/logrus"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// WorkloadValidator checks the strategy of Deployments, StatefulSets and ReplicaSets at
// apply time, so a typo is caught by `kubectl apply` instead of stranding pods later.
type WorkloadValidator struct {
	Capacity Capacity // optional: warns about terms nothing serves
	// WarnOnly turns rejections into warnings.
	WarnOnly bool
	Metrics  *Metrics
	Log      logrus.FieldLogger
}

// workloadMeta is the part of a workload the validator reads.
type workloadMeta struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Template struct {
			metav1.ObjectMeta `json:"metadata"`
		} `json:"template"`
	} `json:"spec"`
}

// Admit implements the validating admission of workloads.
func (v *WorkloadValidator) Admit(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := v.admit(req)
	outcome := OutcomeAllowed
	if !resp.Allowed {
		outcome = OutcomeDenied
	}
	v.Metrics.admissions.WithLabelValues("validate", outcome).Inc()
	return resp
}

func (v *WorkloadValidator) admit(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return allow()
	}
	switch req.Kind.Kind {
	case "Deployment", "StatefulSet", "ReplicaSet":
	default:
		return allow()
	}
	var obj workloadMeta
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return allow(fmt.Sprintf("cannot read the %s to check its strategy: %v", req.Kind.Kind, err))
	}
	name := fmt.Sprintf("%s %s/%s", req.Kind.Kind, req.Namespace, req.Name)
	// Both places a strategy may stand are checked, the pod template first as for pods.
	src := strategy.Find(
		strategy.AnnotatedObject{Name: "the pod template of " + name, Annotations: obj.Spec.Template.Annotations},
		strategy.AnnotatedObject{Name: name, Annotations: obj.Annotations},
	)
	warnings := src.Warnings
	if !src.Active() {
		return allow(warnings...)
	}
	s, err := strategy.Parse(src.Raw)
	if err != nil {
		msg := fmt.Sprintf("%s on %s is invalid: %v", src.Key, src.Object, err)
		// Ratchet: an UPDATE that keeps the same broken value (a scale, an image bump)
		// is not blocked by a fault it did not introduce.
		if v.WarnOnly || v.unchanged(req, src.Raw) {
			return allow(append(warnings, msg)...)
		}
		v.Log.WithField("workload", name).Info("rejecting invalid strategy: " + err.Error())
		return &admissionv1.AdmissionResponse{
			Allowed:  false,
			Result:   &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid, Message: msg},
			Warnings: prefixed(warnings),
		}
	}
	for _, doubt := range s.Warnings {
		warnings = append(warnings, fmt.Sprintf("%s on %s: %s", src.Key, src.Object, doubt))
	}
	if v.Capacity != nil {
		for i, term := range s.Terms {
			if _, served := v.Capacity.Tolerations(term.LabelMap()); !served {
				warnings = append(warnings, unservedWarning(i, term, name, "its pods"))
			}
		}
	}
	return allow(warnings...)
}

// unchanged reports whether an UPDATE's old object carried the same strategy value.
func (v *WorkloadValidator) unchanged(req *admissionv1.AdmissionRequest, raw string) bool {
	if req.Operation != admissionv1.Update || len(req.OldObject.Raw) == 0 {
		return false
	}
	var old workloadMeta
	if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
		return false
	}
	prev := strategy.Find(
		strategy.AnnotatedObject{Annotations: old.Spec.Template.Annotations},
		strategy.AnnotatedObject{Annotations: old.Annotations},
	)
	return prev.Active() && prev.Raw == raw
}

func prefixed(warnings []string) []string {
	return allow(warnings...).Warnings
}

// unservedWarning says that term (0-based index i) of owner is served by no capacity,
// so that pods (who) may stay Pending: at admission and at apply time alike.
func unservedWarning(i int, term strategy.Term, owner, who string) string {
	return fmt.Sprintf("term %d (%s) of %s is served by no NodePool, node group or Ready node; %s may stay Pending", i+1, term.LabelString(), owner, who)
}
