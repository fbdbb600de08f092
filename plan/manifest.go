package plan

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/karpenter/pkg/utils/resources"
	"sigs.k8s.io/yaml"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// Workload is what a plan reads from a manifest (`plan -f deploy.yaml`).
type Workload struct {
	Kind, Namespace, Name string
	// Strategy is the raw strategy: the pod template's or the object's annotation, or
	// (ReadManifestWith) its policy's or namespace default's.
	Strategy string
	// Source names where Strategy came from ("Deployment web", "PlacementPolicy
	// shop/web-split", "Namespace shop").
	Source string
	// Replicas is spec.replicas (1 when absent, as the API server defaults it).
	Replicas int
	// Requests are one pod's requests as Karpenter counts them: the larger of the
	// containers' sum and any init container's, plus the pod overhead.
	Requests corev1.ResourceList
	// PodSpec is the pod template's spec (its images are checked against the terms'
	// architectures by `plan --cluster`).
	PodSpec *corev1.PodSpec
}

// maxManifest bounds a manifest file.
const maxManifest = 4 << 20

var docSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// PolicyLinks tells the strategy links that follow a workload's own annotations: its
// policy and its namespace's default (policy.Index).
type PolicyLinks interface {
	AppendLinks(dst []strategy.AnnotatedObject, w policy.Workload) []strategy.AnnotatedObject
}

// ReadManifest finds the one Deployment, StatefulSet, Argo Rollout, Job or CronJob that carries a
// strategy in a YAML or JSON manifest (several documents may be separated by ---).
func ReadManifest(data []byte) (Workload, error) { return ReadManifestWith(data, nil, "") }

// ReadManifestWith is ReadManifest for a cluster: a workload without a strategy of its
// own takes the one its policy or namespace default gives it (links; nil: none) in its
// namespace (defaultNamespace when the manifest names none).
func ReadManifestWith(data []byte, links PolicyLinks, defaultNamespace string) (Workload, error) {
	if len(data) > maxManifest {
		return Workload{}, fmt.Errorf("manifest larger than %d bytes", maxManifest)
	}
	var found []Workload
	var kinds []string
	for i, doc := range docSeparator.Split(string(data), -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var head metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			return Workload{}, fmt.Errorf("document %d: %w", i+1, err)
		}
		kinds = append(kinds, head.Kind)
		w, ok, err := workloadOf(head.Kind, []byte(doc), links, defaultNamespace)
		if err != nil {
			return Workload{}, fmt.Errorf("document %d (%s): %w", i+1, head.Kind, err)
		}
		if ok {
			found = append(found, w)
		}
	}
	switch len(found) {
	case 0:
		return Workload{}, fmt.Errorf("no Deployment, StatefulSet, Rollout, Job or CronJob with an active %s annotation (kinds seen: %s)", strategy.AnnotationStrategy, strings.Join(kinds, ", "))
	case 1:
		return found[0], nil
	}
	return Workload{}, errors.New("several workloads carry a strategy: give a manifest with one")
}

// rolloutDoc is what a plan reads of an Argo Rollout: its spec has a Deployment's
// replicas and pod template (a Rollout with a workloadRef has no template here).
type rolloutDoc struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Replicas *int32                 `json:"replicas"`
		Template corev1.PodTemplateSpec `json:"template"`
	} `json:"spec"`
}

// workloadOf reads a Deployment, StatefulSet, Argo Rollout, Job or CronJob document;
// false for other kinds and for workloads without an active strategy.
func workloadOf(kind string, doc []byte, links PolicyLinks, defaultNamespace string) (Workload, bool, error) {
	var meta metav1.ObjectMeta
	var tmpl corev1.PodTemplateSpec
	var replicas *int32
	// jobTemplate is a CronJob's job template's annotations, between its pod template's
	// and its own (as the CronJob controller copies them onto each Job).
	var jobTemplate map[string]string
	switch kind {
	case "Deployment":
		var d appsv1.Deployment
		if err := yaml.Unmarshal(doc, &d); err != nil {
			return Workload{}, false, err
		}
		meta, tmpl, replicas = d.ObjectMeta, d.Spec.Template, d.Spec.Replicas
	case "StatefulSet":
		var s appsv1.StatefulSet
		if err := yaml.Unmarshal(doc, &s); err != nil {
			return Workload{}, false, err
		}
		meta, tmpl, replicas = s.ObjectMeta, s.Spec.Template, s.Spec.Replicas
	case "Rollout":
		var r rolloutDoc
		if err := yaml.Unmarshal(doc, &r); err != nil {
			return Workload{}, false, err
		}
		if !strings.HasPrefix(r.APIVersion, "argoproj.io/") {
			return Workload{}, false, nil // some other project's Rollout
		}
		meta, tmpl, replicas = r.ObjectMeta, r.Spec.Template, r.Spec.Replicas
	case "Job":
		var j batchv1.Job
		if err := yaml.Unmarshal(doc, &j); err != nil {
			return Workload{}, false, err
		}
		meta, tmpl, replicas = j.ObjectMeta, j.Spec.Template, jobReplicas(j.Spec)
	case "CronJob":
		var c batchv1.CronJob
		if err := yaml.Unmarshal(doc, &c); err != nil {
			return Workload{}, false, err
		}
		js := c.Spec.JobTemplate.Spec
		meta, tmpl, replicas, jobTemplate = c.ObjectMeta, js.Template, jobReplicas(js), c.Spec.JobTemplate.Annotations
	default:
		return Workload{}, false, nil
	}
	name := kind + " " + meta.Name
	chain := []strategy.AnnotatedObject{{Name: "the pod template of " + name, Annotations: tmpl.Annotations}}
	if kind == "CronJob" {
		chain = append(chain, strategy.AnnotatedObject{Name: "the job template of " + name, Annotations: jobTemplate})
	}
	chain = append(chain, strategy.AnnotatedObject{Name: name, Annotations: meta.Annotations})
	if links != nil {
		ns := meta.Namespace
		if ns == "" {
			ns = defaultNamespace
		}
		chain = links.AppendLinks(chain, policy.Workload{Namespace: ns, Kind: kind, Labels: meta.Labels})
	}
	src := strategy.Find(chain...)
	if !src.Active() {
		return Workload{}, false, nil
	}
	w := Workload{Kind: kind, Namespace: meta.Namespace, Name: meta.Name, Strategy: src.Raw, Source: src.Object, Replicas: 1}
	if replicas != nil {
		if *replicas < 0 {
			return Workload{}, false, fmt.Errorf("spec.replicas %d is negative", *replicas)
		}
		w.Replicas = int(*replicas)
	}
	pod := &corev1.Pod{Spec: tmpl.Spec}
	w.Requests = resources.Ceiling(pod).Requests
	w.PodSpec = &tmpl.Spec
	return w, true, nil
}

// jobReplicas is how many pods a Job of spec runs at once: its parallelism (1 when
// absent, as the API server defaults it), no more than its completions.
func jobReplicas(spec batchv1.JobSpec) *int32 {
	n := int32(1)
	if spec.Parallelism != nil {
		n = *spec.Parallelism
	}
	if spec.Completions != nil {
		n = min(n, *spec.Completions)
	}
	return &n
}
