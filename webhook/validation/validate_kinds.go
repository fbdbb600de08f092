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

// isJobKind reports whether kind is batch's Job or CronJob: their pods are not placed
// yet, so a strategy on them only gets a warning (admitJob).
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
		// A CronJob's Job: its CronJob got the warning at apply; its controller (the
		// one writing the Job) cannot act on it.
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

// jobsNotSplit says that the strategy on a Job or CronJob is ignored, in words its
// owner can act on.
func jobsNotSplit(kind string, src strategy.Source) string {
	whose := "its pods are"
	if kind == "CronJob" {
		whose = "the pods of its Jobs are"
	}
	return fmt.Sprintf("%ss are not split yet: the strategy on %s is ignored; %s placed by the scheduler alone", kind, src.Object, whose)
}

// admitJob admits a Job or CronJob, with a warning when it carries a strategy: its
// pods are not placed yet (the mutating webhook leaves a Job's pods alone), so the
// strategy does nothing. Never refused, whatever the strategy says.
func admitJob(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	name := fmt.Sprintf("%s %s/%s", req.Kind.Kind, req.Namespace, req.Name)
	src, active := jobStrategy(req.Object.Raw, req.Kind.Kind, name)
	if !active {
		return webhook.Allow(src.Warnings...)
	}
	return webhook.Allow(append(src.Warnings, jobsNotSplit(req.Kind.Kind, src))...)
}
