package placement

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/imagearch"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
)

// reasonImageArchitecture is the Event reason of a term whose capacity cannot run the
// pod's images.
const reasonImageArchitecture = "ImageArchitectureMismatch"

// defaultImageBudget is how long an admission waits for its images' architectures.
const defaultImageBudget = time.Second

// ImageLookup answers the architectures every image of a request supports
// (*imagearch.Resolver).
type ImageLookup interface {
	Architectures(ctx context.Context, req imagearch.Request) ([]string, error)
}

// ArchitectureCapacity answers which CPU architectures the capacity serving a term's
// labels offers (*karpenter.Catalog).
type ArchitectureCapacity interface {
	Architectures(labels map[string]string) []string
}

// ImageArchitectures sends pods only where their images can run: when a pod and its
// term leave kubernetes.io/arch open and the term's capacity offers more than one
// architecture, the pod gets a required node affinity on the architectures all its
// images support; a term offering none of them is reported.
type ImageArchitectures struct {
	// Images answers what the pod's images support.
	Images ImageLookup
	// Capacity answers what a term's capacity offers (nil: only terms that pin an
	// architecture are checked).
	Capacity ArchitectureCapacity
	// Budget bounds the wait for the images' answer (0: defaultImageBudget); the lookup
	// goes on after it, for the next pod.
	Budget time.Duration
}

// archVerdict is what the architecture step decided for one pod on one term.
type archVerdict struct {
	outcome string
	// require is the architectures the pod is limited to (nil: nothing added).
	require []string
	warning string
	// cannotRun says why the term cannot run the pod's images ("": it can).
	cannotRun string
}

// verdict decides the architecture requirement of pod placed on term (index i).
func (ia *ImageArchitectures) verdict(ctx context.Context, pod *corev1.Pod, namespace string, i int, term strategy.Term, owner string) archVerdict {
	if podPinsArchitecture(pod) {
		return archVerdict{outcome: webhook.ArchSkipped}
	}
	labels := term.LabelMap()
	offered, pinned := termArchitectures(labels)
	if !pinned && ia.Capacity != nil {
		offered = ia.Capacity.Architectures(labels)
	}
	if !pinned && len(offered) < 2 {
		return archVerdict{outcome: webhook.ArchSkipped}
	}
	budget := ia.Budget
	if budget <= 0 {
		budget = defaultImageBudget
	}
	lctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	supported, err := ia.Images.Architectures(lctx, imagearch.PodRequest(namespace, &pod.Spec))
	switch {
	case err != nil:
		return archVerdict{outcome: webhook.ArchUnknown, warning: fmt.Sprintf("placed without a kubernetes.io/arch requirement: the architectures of the pod's images are not known (%v)", err)}
	case len(supported) == 0:
		return archVerdict{outcome: webhook.ArchSkipped}
	}
	runnable := imagearch.Intersect(offered, supported)
	switch {
	case len(runnable) == 0:
		return archVerdict{outcome: webhook.ArchCannotRun, cannotRun: cannotRunMessage(i, term, owner, offered, supported, pinned, "the pod's images")}
	case len(runnable) == len(offered):
		return archVerdict{outcome: webhook.ArchUnneeded}
	}
	return archVerdict{outcome: webhook.ArchRequired, require: runnable}
}

// cannotRunMessage says that term (0-based index i) of owner offers only architectures
// the images (who) do not support.
func cannotRunMessage(i int, term strategy.Term, owner string, offered, supported []string, pinned bool, who string) string {
	what := "the capacity serving it offers kubernetes.io/arch " + imagearch.Describe(offered)
	if pinned {
		what = "it pins kubernetes.io/arch=" + imagearch.Describe(offered)
	}
	return fmt.Sprintf("term %d (%s) of %s cannot run %s: %s, and they support only %s", i+1, term.LabelString(), owner, who, what, imagearch.Describe(supported))
}

// termArchitectures is the architecture (or set of them) a term's labels pin, if they do.
func termArchitectures(labels map[string]string) ([]string, bool) {
	for _, k := range []string{corev1.LabelArchStable, betaArchLabel} {
		if v, ok := labels[k]; ok {
			return strategy.SplitValues(v), true
		}
	}
	return nil, false
}

// betaArchLabel is kubernetes.io/arch's deprecated alias, still honoured by Karpenter.
const betaArchLabel = "beta.kubernetes.io/arch"

// podPinsArchitecture reports whether the pod chose its architecture itself: in its
// nodeSelector, or in every term of its required node affinity.
func podPinsArchitecture(pod *corev1.Pod) bool {
	for _, k := range []string{corev1.LabelArchStable, betaArchLabel} {
		if _, ok := pod.Spec.NodeSelector[k]; ok {
			return true
		}
	}
	terms := requiredTerms(pod)
	if len(terms) == 0 {
		return false
	}
	for _, t := range terms {
		if !slices.ContainsFunc(t.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool {
			return r.Key == corev1.LabelArchStable || r.Key == betaArchLabel
		}) {
			return false
		}
	}
	return true
}

// requiredTerms are the pod's required node affinity terms.
func requiredTerms(pod *corev1.Pod) []corev1.NodeSelectorTerm {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	return a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
}

// Check reports the terms of s that cannot run the images of a pod template (spec, in
// namespace), for the validating webhook and `plan --cluster`: faults for terms that
// pin an architecture none of the images supports (refused in reject mode), warnings for
// terms whose capacity offers several architectures and none of theirs. A lookup that
// fails or runs out of budget reports its error and nothing else.
func (ia *ImageArchitectures) Check(ctx context.Context, namespace string, spec *corev1.PodSpec, s *strategy.Strategy, owner string) (faults, warnings []string, err error) {
	type termArches struct {
		offered []string
		pinned  bool
	}
	terms := make([]termArches, len(s.Terms))
	needed := false
	for i, t := range s.Terms {
		labels := t.LabelMap()
		offered, pinned := termArchitectures(labels)
		if !pinned && ia.Capacity != nil {
			offered = ia.Capacity.Architectures(labels)
		}
		terms[i] = termArches{offered, pinned}
		needed = needed || pinned || len(offered) > 1
	}
	if !needed {
		return nil, nil, nil
	}
	budget := ia.Budget
	if budget <= 0 {
		budget = defaultImageBudget
	}
	lctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	supported, err := ia.Images.Architectures(lctx, imagearch.PodRequest(namespace, spec))
	if err != nil || len(supported) == 0 {
		return nil, nil, err
	}
	for i, t := range terms {
		if (!t.pinned && len(t.offered) < 2) || len(imagearch.Intersect(t.offered, supported)) > 0 {
			continue
		}
		msg := cannotRunMessage(i, s.Terms[i], owner, t.offered, supported, t.pinned, "its pods' images")
		if t.pinned {
			faults = append(faults, msg)
		} else {
			warnings = append(warnings, msg)
		}
	}
	return faults, warnings, nil
}
