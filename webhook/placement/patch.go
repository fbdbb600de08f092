package placement

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// patchOp is one RFC 6902 operation.
//
// Patches are built op by op rather than by diffing a re-marshalled pod against the
// request (as controller-runtime's PatchResponseFromRaw does): a diff would emit
// "remove" ops for any field this binary's API version does not know, silently dropping
// it from newer clusters' pods. Only "add" is used, and only on keys that are absent.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// pointerEscaper escapes "~" then "/" (RFC 6901). Built once: building a Replacer
// allocates its lookup tables, which was a sixth of an admission's allocations.
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// escapePointer escapes a map key for a JSON pointer (RFC 6901).
func escapePointer(key string) string {
	if !strings.ContainsAny(key, "~/") {
		return key
	}
	return pointerEscaper.Replace(key)
}

// placementPatch is the JSON patch that places pod: the term's single-valued labels
// added to its nodeSelector, its sets of values as required node affinity "In", the
// tolerations it needs, the architectures its images run on (nil: none required), the
// seat annotations and the managed label.
func placementPatch(pod *corev1.Pod, selector map[string]string, tolerations []corev1.Toleration, arches []string, annotations map[string]string) ([]byte, error) {
	p := &podPatch{pod: pod}
	single := make(map[string]string, len(selector))
	var reqs []corev1.NodeSelectorRequirement
	for _, k := range slices.Sorted(maps.Keys(selector)) {
		v := selector[k]
		if !strings.Contains(v, strategy.SetSeparator) {
			single[k] = v
			continue
		}
		if _, pinned := pod.Spec.NodeSelector[k]; pinned {
			// The pod narrowed the set itself (decide checked its value is in it).
			continue
		}
		reqs = append(reqs, corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpIn, Values: strategy.SplitValues(v)})
	}
	p.addToMap("/spec/nodeSelector", pod.Spec.NodeSelector, single)
	p.mergeTolerations(tolerations)
	if len(arches) > 0 {
		reqs = append(reqs, corev1.NodeSelectorRequirement{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: arches})
	}
	p.require(reqs)
	p.addToMap("/metadata/annotations", pod.Annotations, annotations)
	p.addToMap("/metadata/labels", pod.Labels, map[string]string{strategy.LabelManaged: "true"})
	return p.marshal()
}

// podPatch collects additions to a pod and renders them as a JSON patch that merges:
// existing nodeSelector keys, tolerations, labels and annotations are kept.
type podPatch struct {
	pod *corev1.Pod
	ops []patchOp
}

// addToMap adds entries to the string map at path, whose current value is current.
// A missing map is added whole; an existing one gets one op per key, never a
// replacement. Keys come out sorted so the patch is deterministic.
func (p *podPatch) addToMap(path string, current, add map[string]string) {
	if len(add) == 0 {
		return
	}
	if current == nil {
		p.ops = append(p.ops, patchOp{Op: "add", Path: path, Value: add})
		return
	}
	keys := make([]string, 0, len(add))
	for k := range add {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, exists := current[k]; exists {
			continue
		}
		p.ops = append(p.ops, patchOp{Op: "add", Path: path + "/" + escapePointer(k), Value: add[k]})
	}
}

// mergeTolerations appends to /spec/tolerations each of needed the pod's own
// tolerations (kept first and in order) do not already cover.
func (p *podPatch) mergeTolerations(needed []corev1.Toleration) {
	add := karpenter.MergeTolerations(p.pod.Spec.Tolerations, needed)[len(p.pod.Spec.Tolerations):]
	if len(add) == 0 {
		return
	}
	if p.pod.Spec.Tolerations == nil {
		p.ops = append(p.ops, patchOp{Op: "add", Path: "/spec/tolerations", Value: add})
		return
	}
	for _, t := range add {
		p.ops = append(p.ops, patchOp{Op: "add", Path: "/spec/tolerations/-", Value: t})
	}
}

// require adds reqs (required node affinity, such as kubernetes.io/arch In the
// architectures the images run on, or a term's set of values) to every term of the
// pod's required node affinity (terms are ORed, so each must carry them), or as a term
// of its own when the pod has none. Nothing of the pod's is replaced: only absent
// fields are added, and a requirement a term already holds exactly (a copied pod) is
// not added again.
func (p *podPatch) require(reqs []corev1.NodeSelectorRequirement) {
	if len(reqs) == 0 {
		return
	}
	fresh := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: reqs}}}
	const (
		affinity = "/spec/affinity"
		node     = affinity + "/nodeAffinity"
		required = node + "/requiredDuringSchedulingIgnoredDuringExecution"
		terms    = required + "/nodeSelectorTerms"
	)
	a := p.pod.Spec.Affinity
	switch {
	case a == nil:
		p.ops = append(p.ops, patchOp{Op: "add", Path: affinity, Value: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: fresh}}})
	case a.NodeAffinity == nil:
		p.ops = append(p.ops, patchOp{Op: "add", Path: node, Value: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: fresh}})
	case a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil:
		p.ops = append(p.ops, patchOp{Op: "add", Path: required, Value: fresh})
	case len(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0:
		// Absent or empty (which the API server would refuse): nothing to keep.
		p.ops = append(p.ops, patchOp{Op: "add", Path: terms, Value: fresh.NodeSelectorTerms})
	default:
		for i, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			var add []corev1.NodeSelectorRequirement
			for _, req := range reqs {
				if !slices.ContainsFunc(t.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool {
					return r.Key == req.Key && r.Operator == req.Operator && slices.Equal(r.Values, req.Values)
				}) {
					add = append(add, req)
				}
			}
			if len(add) == 0 {
				continue
			}
			path := terms + "/" + strconv.Itoa(i) + "/matchExpressions"
			if t.MatchExpressions == nil {
				p.ops = append(p.ops, patchOp{Op: "add", Path: path, Value: add})
				continue
			}
			for _, req := range add {
				p.ops = append(p.ops, patchOp{Op: "add", Path: path + "/-", Value: req})
			}
		}
	}
}

func (p *podPatch) marshal() ([]byte, error) {
	b, err := json.Marshal(p.ops)
	if err != nil {
		return nil, fmt.Errorf("marshal JSON patch: %w", err)
	}
	return b, nil
}
