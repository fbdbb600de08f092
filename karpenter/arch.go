package karpenter

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// knownArchitectures are the CPU architectures Karpenter's providers launch: amd64 and
// arm64 (AWS's x86 and Graviton instances; the kwok provider's instance types). A
// NodePool whose requirements leave kubernetes.io/arch open may launch either:
// Karpenter v1 dropped the amd64 default the v1alpha5 Provisioner had.
var knownArchitectures = []string{karpv1.ArchitectureAmd64, karpv1.ArchitectureArm64}

// nodePoolArchitectures is what the NodePool's requirements, with term's labels,
// allow of knownArchitectures. A pool that limits the architecture only through its
// instance types (a Graviton family) is taken to offer both: the webhook does not know
// the provider's instance types.
func nodePoolArchitectures(np *karpv1.NodePool, term map[string]string) []string {
	reqs, err := nodePoolRequirements(np)
	if err != nil {
		return nil
	}
	reqs.Add(termRequirements(term).Values()...)
	r := reqs.Get(corev1.LabelArchStable)
	var out []string
	for _, a := range knownArchitectures {
		if r.Has(a) {
			out = append(out, a)
		}
	}
	return out
}

// labelArchitectures is the architecture a node (or a node group's nodes) carries by
// its labels, if term allows it; labels without one may be any known architecture.
func labelArchitectures(labels, term map[string]string) []string {
	arch, ok := labels[corev1.LabelArchStable]
	if !ok {
		arch, ok = aliasValue(labels, corev1.LabelArchStable)
	}
	var out []string
	if ok {
		out = []string{arch}
	} else {
		out = slices.Clone(knownArchitectures)
	}
	if want, pinned := termArchitecture(term); pinned {
		if out = slices.DeleteFunc(out, func(a string) bool { return !slices.Contains(want, a) }); len(out) == 0 {
			return nil
		}
	}
	return out
}

// termArchitecture is the architecture (or set of them) term pins, if any (under
// either key).
func termArchitecture(term map[string]string) ([]string, bool) {
	for k, v := range term {
		if normalizedKey(k) == corev1.LabelArchStable {
			return strategy.SplitValues(v), true
		}
	}
	return nil, false
}

// architecturesOf returns the sorted union of the sources' architectures.
func architecturesOf(sources []Source) []string {
	var out []string
	for _, s := range sources {
		for _, a := range s.Architectures {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	slices.Sort(out)
	return out
}
