package validation

import (
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
)

// isRolloutKind reports whether kind is Argo Rollouts' Rollout (argoproj.io, any
// version). Its spec.template is a Deployment's, so it is validated as one; a Rollout
// that names its template through spec.workloadRef has none of its own to check.
func isRolloutKind(kind metav1.GroupVersionKind) bool {
	return kind.Group == policy.RolloutResource.Group && kind.Kind == "Rollout"
}

// isJobKind reports whether kind is batch's Job or CronJob: a strategy on them is
// checked, and a fault only warned (admitJob).
func isJobKind(kind metav1.GroupVersionKind) bool {
	return kind.Group == "batch" && (kind.Kind == "Job" || kind.Kind == "CronJob")
}

// jobMeta is the part of a Job or CronJob that can carry a strategy: the object, a
// CronJob's job template, and the pod template (a Job's spec.template, a CronJob's
// spec.jobTemplate.spec.template).
type jobMeta struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Template    templateMeta `json:"template"`
		JobTemplate struct {
			metav1.ObjectMeta `json:"metadata"`
			Spec              struct {
				Template templateMeta `json:"template"`
			} `json:"spec"`
		} `json:"jobTemplate"`
	} `json:"spec"`
}

type templateMeta struct {
	metav1.ObjectMeta `json:"metadata"`
}

// jobStrategy finds the strategy a Job or CronJob carries (pod template first, as for
// pods; inactive when none, or switched off). name is e.g. "Job shop/nightly".
func jobStrategy(raw []byte, kind, name string) (strategy.Source, bool) {
	var obj jobMeta
	if json.Unmarshal(raw, &obj) != nil {
		return strategy.Source{}, false
	}
	if ref := metav1.GetControllerOfNoCopy(&obj); ref != nil && ref.Kind == "CronJob" {
		// A CronJob's Job: its CronJob was checked at apply; its controller (the one
		// writing the Job) cannot act on a warning.
		return strategy.Source{}, false
	}
	chain := []strategy.AnnotatedObject{{Name: "the pod template of " + name, Annotations: obj.Spec.Template.Annotations}}
	if kind == "CronJob" {
		chain = []strategy.AnnotatedObject{
			{Name: "the pod template of " + name, Annotations: obj.Spec.JobTemplate.Spec.Template.Annotations},
			{Name: "the job template of " + name, Annotations: obj.Spec.JobTemplate.Annotations},
		}
	}
	src := strategy.Find(append(chain, strategy.AnnotatedObject{Name: name, Annotations: obj.Annotations})...)
	return src, src.Active()
}

// admitJob admits a Job or CronJob, warning when the strategy it carries is invalid
// (its pods would be admitted unplaced). Never refused: a Job is often created by a
// controller (a CronJob's, a workflow engine's) that cannot act on a refusal.
func admitJob(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	name := fmt.Sprintf("%s %s/%s", req.Kind.Kind, req.Namespace, req.Name)
	src, active := jobStrategy(req.Object.Raw, req.Kind.Kind, name)
	if !active {
		return webhook.Allow(src.Warnings...)
	}
	warnings := src.Warnings
	s, err := strategy.Parse(src.Raw)
	if err != nil {
		return webhook.Allow(append(warnings, fmt.Sprintf("%s on %s is invalid, its pods will not be placed: %v", src.Key, src.Object, err))...)
	}
	for _, doubt := range s.Warnings {
		warnings = append(warnings, fmt.Sprintf("%s on %s: %s", src.Key, src.Object, doubt))
	}
	return webhook.Allow(warnings...)
}
