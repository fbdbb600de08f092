package karpenter

import (
	corev1 "k8s.io/api/core/v1"
)

// Kinds of Source.
const (
	KindNodePool  = "NodePool"
	KindNodeGroup = "NodeGroup"
	KindNode      = "Node"
)

// Source is one piece of capacity that can carry a term.
type Source struct {
	// Kind is KindNodePool, KindNodeGroup or KindNode.
	Kind string
	// Name is the NodePool, node group or Node name.
	Name string
	// Taints are the NodePool's template taints (never its startupTaints,
	// which Karpenter expects a daemon to remove), the node group's taints, or
	// the Node's current taints.
	Taints []corev1.Taint
	// Architectures are the kubernetes.io/arch values it can give a pod of the term:
	// what a NodePool's requirements allow of the architectures Karpenter launches
	// (knownArchitectures; a NodePool that leaves the label open offers them all, as
	// Karpenter v1 sets no default), a node group's AMI architecture, a Node's label.
	Architectures []string
}

// String returns Kind/Name, e.g. "NodePool/spot".
func (s Source) String() string { return s.Kind + "/" + s.Name }

// TolerationsFor returns tolerations for the taints of the NodePools and node
// groups among sources, without duplicates and without one already covered by
// another. Taints of individual Nodes are not tolerated: a pod is steered to
// the capacity its term names, not to whatever tainted node happens to match.
// A taint with a value gets an Equal toleration; one without a value gets
// Exists on its key. No tolerationSeconds is set.
func TolerationsFor(sources []Source) []corev1.Toleration {
	var add []corev1.Toleration
	for _, s := range sources {
		if s.Kind != KindNodePool && s.Kind != KindNodeGroup {
			continue
		}
		for _, t := range s.Taints {
			add = append(add, tolerationFor(t))
		}
	}
	return MergeTolerations(nil, add)
}

func tolerationFor(t corev1.Taint) corev1.Toleration {
	if t.Value == "" {
		return corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOpExists, Effect: t.Effect}
	}
	return corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOpEqual, Value: t.Value, Effect: t.Effect}
}

// MergeTolerations returns existing, unchanged and in order, followed by each
// toleration of add that nothing before it already covers. A toleration is
// covered when another one tolerates every taint it tolerates: same key and
// value, Exists on the same key, or an empty-key Exists; with the same effect
// or an empty (any) effect. tolerationSeconds is not compared: a toleration
// the pod already has for a taint is the owner's choice and is kept as is.
// Neither input is modified.
func MergeTolerations(existing, add []corev1.Toleration) []corev1.Toleration {
	out := make([]corev1.Toleration, 0, len(existing)+len(add))
	out = append(out, existing...)
	for _, a := range add {
		if !coveredBy(out, a) {
			out = append(out, a)
		}
	}
	return out
}

func coveredBy(have []corev1.Toleration, want corev1.Toleration) bool {
	for _, h := range have {
		if covers(h, want) {
			return true
		}
	}
	return false
}

// covers reports whether h tolerates every taint that w tolerates.
func covers(h, w corev1.Toleration) bool {
	if h.MatchToleration(&w) {
		return true
	}
	if h.Effect != "" && h.Effect != w.Effect {
		return false
	}
	switch h.Operator {
	case corev1.TolerationOpExists:
		return h.Key == "" || h.Key == w.Key
	case corev1.TolerationOpEqual, "":
		wOp := w.Operator
		if wOp == "" {
			wOp = corev1.TolerationOpEqual
		}
		return h.Key == w.Key && wOp == corev1.TolerationOpEqual && h.Value == w.Value
	default:
		// Numeric comparison operators (Gt/Lt): not worth reasoning about,
		// adding an explicit toleration is harmless.
		return false
	}
}
