package validation

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/imagearch"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/placement"
)

// WorkloadValidator checks the strategy of Deployments, StatefulSets, ReplicaSets and
// Argo Rollouts (and warns of an invalid one on Jobs and CronJobs), of
// PlacementPolicies and ClusterPlacementPolicies, and a Namespace's default, at apply
// time, so a typo is caught by `kubectl apply` instead of stranding pods later.
type WorkloadValidator struct {
	Capacity placement.Capacity // optional: warns about terms nothing serves
	// Hints names the likely typo of a term nothing serves (nil: not named); a term
	// with a likely typo is refused unless WarnOnly.
	Hints Hinter
	// Scope tells where the API server sends pods (nil: not checked): a Namespace
	// default or a policy that applies only where it does not is warned.
	Scope *NamespaceScope
	// Images checks the terms against the architectures of the pod template's images
	// (nil: not checked).
	Images *placement.ImageArchitectures
	// WarnOnly turns rejections into warnings.
	WarnOnly bool
	Metrics  Counter
	Log      logrus.FieldLogger

	strategies strategy.Resolver
}

// Counter counts admissions by webhook and outcome (webhook.Metrics).
type Counter interface {
	Admitted(hook, outcome string)
}

// Hinter names the labels of a term that no capacity offers, and the closest offered
// key or value (karpenter.Catalog.Hint); likely is set when it names one.
type Hinter interface {
	Hint(term map[string]string) (hint string, likely bool)
}

// NamespaceScope is what the validator asks of the webhook's scope and the namespaces.
type NamespaceScope struct {
	// WhyNot says why pods of namespace ns, with nsLabels, are not sent to the webhook
	// ("" when they are, or when the scope is not known).
	WhyNot func(ns string, nsLabels map[string]string, what string) string
	// Each calls fn with every namespace's name and labels.
	Each func(fn func(name string, labels map[string]string))
}

// workloadMeta is the part of a workload the validator reads.
type workloadMeta struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Template struct {
			metav1.ObjectMeta `json:"metadata"`
			Spec              corev1.PodSpec `json:"spec"`
		} `json:"template"`
		// WorkloadRef is an Argo Rollout's reference to the workload whose pod template
		// it uses instead of its own (non-nil: it has no template to check).
		WorkloadRef *json.RawMessage `json:"workloadRef,omitempty"`
	} `json:"spec"`
}

// Admit implements the validating admission of workloads.
func (v *WorkloadValidator) Admit(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := v.admit(ctx, req)
	outcome := webhook.OutcomeAllowed
	if !resp.Allowed {
		outcome = webhook.OutcomeDenied
	}
	v.Metrics.Admitted("validate", outcome)
	return resp
}

func (v *WorkloadValidator) admit(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return webhook.Allow()
	}
	switch {
	case req.SubResource != "":
		return webhook.Allow()
	case req.Kind.Group == v1alpha1.Group && (req.Kind.Kind == v1alpha1.KindPlacementPolicy || req.Kind.Kind == v1alpha1.KindClusterPlacementPolicy):
		return v.admitPolicy(req)
	case req.Kind.Group == "" && req.Kind.Kind == "Namespace":
		return v.admitNamespace(req)
	case req.Kind.Kind == "Deployment", req.Kind.Kind == "StatefulSet", req.Kind.Kind == "ReplicaSet", isRolloutKind(req.Kind):
	case isJobKind(req.Kind):
		return admitJob(req)
	default:
		return webhook.Allow()
	}
	var obj workloadMeta
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return webhook.Allow(fmt.Sprintf("cannot read the %s to check its strategy: %v", req.Kind.Kind, err))
	}
	name := fmt.Sprintf("%s %s/%s", req.Kind.Kind, req.Namespace, req.Name)
	// Both places a strategy may stand are checked, the pod template first as for pods.
	links := []strategy.AnnotatedObject{
		{Name: "the pod template of " + name, Annotations: obj.Spec.Template.Annotations},
		{Name: name, Annotations: obj.Annotations},
	}
	src := v.strategies.Resolve(links...)
	warnings := append(src.Warnings, strategy.LookalikeKeys(links[0])...)
	warnings = append(warnings, strategy.LookalikeKeys(links[1])...)
	// A move window or minimum stay that does not parse holds the loop's non-urgent
	// moves (it does not fall back to moving any time): said now, not at the next move.
	if timing := strategy.TimingOf(links, "", strategy.Timing{}); timing.Err != nil {
		warnings = append(warnings, fmt.Sprintf("%v; the convergence loop holds the workload's non-urgent moves until it is fixed", timing.Err))
	}
	if !src.Active() {
		return webhook.Allow(warnings...)
	}
	s, err := src.Strategy, src.Err
	if err != nil {
		msg := fmt.Sprintf("%s on %s is invalid: %v", src.Key, src.Object, err)
		// Ratchet: an UPDATE that keeps the same broken value (a scale, an image bump)
		// is not blocked by a fault it did not introduce.
		if v.WarnOnly || v.unchanged(req, src.Raw) {
			return webhook.Allow(append(warnings, msg)...)
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
	unserved, typos := v.unserved(s, name, "its pods")
	warnings = append(warnings, unserved...)
	if len(typos) > 0 {
		return v.refuseWith(req, name, warnings, typos, v.unchanged(req, src.Raw))
	}
	if v.Images != nil && obj.Spec.WorkloadRef == nil {
		// A failed lookup says nothing here: admission looks again.
		faults, doubts, _ := v.Images.Check(ctx, req.Namespace, &obj.Spec.Template.Spec, s, name)
		warnings = append(warnings, doubts...)
		if len(faults) > 0 {
			// Ratchet, as for an invalid strategy: an UPDATE keeping both the strategy
			// and the images is not refused for a fault it did not introduce.
			return v.refuseWith(req, name, warnings, faults, v.unchangedImages(req, src.Raw, &obj.Spec.Template.Spec))
		}
	}
	return webhook.Allow(warnings...)
}

// unchangedImages reports whether an UPDATE's old object carried the same strategy
// value and the same images.
func (v *WorkloadValidator) unchangedImages(req *admissionv1.AdmissionRequest, raw string, spec *corev1.PodSpec) bool {
	if !v.unchanged(req, raw) {
		return false
	}
	var old workloadMeta
	if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
		return false
	}
	return slices.Equal(imagearch.PodRequest("", &old.Spec.Template.Spec).Images, imagearch.PodRequest("", spec).Images)
}

// AdmitNotEnabled answers the calls the API server makes for workloads in namespaces
// that are not enabled for the webhook (scope opt-in): their pods are never sent, so a
// strategy there places nothing. It always admits; a workload with an active strategy
// gets a warning that says so and names the label.
func (v *WorkloadValidator) AdmitNotEnabled(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	v.Metrics.Admitted("validate", webhook.OutcomeAllowed)
	if isJobKind(req.Kind) {
		name := fmt.Sprintf("%s %s/%s", req.Kind.Kind, req.Namespace, req.Name)
		if _, active := jobStrategy(req.Object.Raw, req.Kind.Kind, name); active {
			return webhook.Allow(strategy.NotEnabled(req.Namespace, name))
		}
		return webhook.Allow()
	}
	var obj workloadMeta
	if req.Object.Raw == nil || json.Unmarshal(req.Object.Raw, &obj) != nil {
		return webhook.Allow()
	}
	src := strategy.Find(
		strategy.AnnotatedObject{Annotations: obj.Spec.Template.Annotations},
		strategy.AnnotatedObject{Annotations: obj.Annotations},
	)
	if !src.Active() {
		return webhook.Allow()
	}
	return webhook.Allow(strategy.NotEnabled(req.Namespace, fmt.Sprintf("%s %s/%s", req.Kind.Kind, req.Namespace, req.Name)))
}

// admitPolicy checks a PlacementPolicy's or ClusterPlacementPolicy's strategy with the
// grammar the annotation has (the CRD schema checks the shape) and its selectors.
func (v *WorkloadValidator) admitPolicy(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	c, err := decodePolicy(req.Object.Raw)
	if err != nil {
		return webhook.Allow(fmt.Sprintf("cannot read the %s to check its strategy: %v", req.Kind.Kind, err))
	}
	raw := c.Link.Annotations[strategy.AnnotationStrategy]
	var faults []string
	if c.SelectorErr != nil {
		faults = append(faults, fmt.Sprintf("%s is invalid: %v", c.Link.Name, c.SelectorErr))
	}
	if t := strategy.TimingOf([]strategy.AnnotatedObject{c.Link}, c.Link.Name, strategy.Timing{}); t.Err != nil {
		faults = append(faults, fmt.Sprintf("spec.moveWindow or spec.minFallbackStay of %s is invalid: %v", c.Link.Name, t.Err))
	}
	s, perr := v.strategies.Parse(raw)
	if perr != nil {
		faults = append(faults, fmt.Sprintf("spec.strategy of %s is invalid: %v", c.Link.Name, perr))
	}
	unchanged := false
	if req.Operation == admissionv1.Update && len(req.OldObject.Raw) > 0 {
		if old, err := decodePolicy(req.OldObject.Raw); err == nil {
			unchanged = old.Link.Annotations[strategy.AnnotationStrategy] == raw && (old.SelectorErr == nil) == (c.SelectorErr == nil)
		}
	}
	if len(faults) > 0 {
		return v.refuse(req, c.Link.Name, strings.Join(faults, "; "), unchanged)
	}
	var warnings []string
	for _, doubt := range s.Warnings {
		warnings = append(warnings, fmt.Sprintf("spec.strategy of %s: %s", c.Link.Name, doubt))
	}
	warnings = append(warnings, v.policyOutOfScope(c)...)
	unserved, typos := v.unserved(s, c.Link.Name, "the pods it governs")
	warnings = append(warnings, unserved...)
	if len(typos) > 0 {
		return v.refuseWith(req, c.Link.Name, warnings, typos, unchanged)
	}
	return webhook.Allow(warnings...)
}

// policyOutOfScope warns when a policy applies only in namespaces whose pods the API
// server does not send to the webhook: it would govern nothing there.
func (v *WorkloadValidator) policyOutOfScope(c *policy.Compiled) []string {
	if v.Scope == nil {
		return nil
	}
	var selected, covered []string
	why := ""
	v.Scope.Each(func(ns string, nsLabels map[string]string) {
		if (c.Cluster() || ns == c.Namespace) && c.SelectsNamespace(nsLabels) {
			selected = append(selected, ns)
			w := v.Scope.WhyNot(ns, nsLabels, "the workloads "+c.Link.Name+" selects")
			if w == "" {
				covered = append(covered, ns)
			} else if why == "" || ns == c.Namespace {
				why = w
			}
		}
	})
	switch {
	case len(covered) > 0:
		return nil
	case !c.Cluster() && why != "":
		return []string{fmt.Sprintf("%s governs nothing: %s", c.Link.Name, why)}
	case c.Cluster() && len(selected) == 0:
		return []string{fmt.Sprintf("%s governs nothing: its namespaceSelector matches no namespace", c.Link.Name)}
	case c.Cluster():
		slices.Sort(selected)
		return []string{fmt.Sprintf("%s governs nothing: none of the namespaces it selects (%s) is enabled for the webhook; e.g. %s", c.Link.Name, firstNames(selected), why)}
	}
	return nil
}

// firstNames lists up to 5 names, and how many more there are.
func firstNames(names []string) string {
	if len(names) <= 5 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:5], ", "), len(names)-5)
}

// unserved returns a warning for each term of s that nothing serves (owner names whose
// strategy it is, who the pods that may stay Pending), with the likely typo when Hints
// names one; those are also returned as typos, which reject mode refuses. Nothing is
// said until the capacity has been read (Hints would guess from nothing).
func (v *WorkloadValidator) unserved(s *strategy.Strategy, owner, who string) (warnings, typos []string) {
	if v.Capacity == nil {
		return nil, nil
	}
	for i, term := range s.Terms {
		if _, served := v.Capacity.Tolerations(term.LabelMap()); served {
			continue
		}
		msg := placement.UnservedWarning(i, term, owner, who)
		if v.Hints == nil {
			warnings = append(warnings, msg)
			continue
		}
		hint, likely := v.Hints.Hint(term.LabelMap())
		if hint != "" {
			msg += ": " + hint
		}
		if likely {
			typos = append(typos, msg)
		} else {
			warnings = append(warnings, msg)
		}
	}
	return warnings, typos
}

// refuseWith refuses req for faults (or only warns: refuse), keeping warnings.
func (v *WorkloadValidator) refuseWith(req *admissionv1.AdmissionRequest, name string, warnings, faults []string, unchanged bool) *admissionv1.AdmissionResponse {
	resp := v.refuse(req, name, strings.Join(faults, "; "), unchanged)
	resp.Warnings = append(prefixed(warnings), resp.Warnings...)
	return resp
}

// decodePolicy compiles a policy from its JSON.
func decodePolicy(raw []byte) (*policy.Compiled, error) {
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	return policy.Decode(&unstructured.Unstructured{Object: obj})
}

// admitNamespace checks a Namespace's default strategy (its strategy annotation).
func (v *WorkloadValidator) admitNamespace(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	var ns, old corev1.Namespace
	if err := json.Unmarshal(req.Object.Raw, &ns); err != nil {
		return webhook.Allow(fmt.Sprintf("cannot read the Namespace to check its strategy: %v", err))
	}
	name := "Namespace " + ns.Name
	src := strategy.Find(policy.NamespaceOf(&ns).Link)
	warnings := append(src.Warnings, strategy.LookalikeKeys(strategy.AnnotatedObject{Name: name, Annotations: ns.Annotations})...)
	if !src.Active() {
		return webhook.Allow(warnings...)
	}
	unchanged := false
	if req.Operation == admissionv1.Update && json.Unmarshal(req.OldObject.Raw, &old) == nil {
		prev := strategy.Find(policy.NamespaceOf(&old).Link)
		unchanged = prev.Active() && prev.Raw == src.Raw
	}
	s, err := v.strategies.Parse(src.Raw)
	if err != nil {
		return v.refuse(req, name, fmt.Sprintf("%s on %s is invalid: %v", src.Key, name, err), unchanged)
	}
	for _, doubt := range s.Warnings {
		warnings = append(warnings, fmt.Sprintf("%s on %s: %s", src.Key, name, doubt))
	}
	if v.Scope != nil {
		if why := v.Scope.WhyNot(ns.Name, ns.Labels, "the workloads its default strategy would govern"); why != "" {
			warnings = append(warnings, "the default strategy of "+name+" governs nothing: "+why)
		}
	}
	unserved, typos := v.unserved(s, name, "the pods it governs")
	warnings = append(warnings, unserved...)
	if len(typos) > 0 {
		return v.refuseWith(req, name, warnings, typos, unchanged)
	}
	return webhook.Allow(warnings...)
}

// refuse rejects req with msg, or only warns when validation is WarnOnly or the UPDATE
// keeps a fault it did not introduce.
func (v *WorkloadValidator) refuse(req *admissionv1.AdmissionRequest, name, msg string, unchanged bool) *admissionv1.AdmissionResponse {
	if v.WarnOnly || unchanged {
		return webhook.Allow(msg)
	}
	v.Log.WithField("object", name).Info("rejecting invalid strategy: " + msg)
	return &admissionv1.AdmissionResponse{
		Allowed: false,
		Result:  &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid, Message: msg},
	}
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
	return webhook.Allow(warnings...).Warnings
}
