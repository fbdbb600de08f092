// Package strategy parses the CustomPodScheduleStrategy annotation and computes the
// exact placement it defines. It uses no Kubernetes client and does no I/O (pods are
// read as API types only).
//
// A strategy is a list of terms, each a set of node labels with an optional base and a
// weight, in the style of an ECS capacity provider strategy:
//
//	karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3
package strategy

import (
	"fmt"
	"math"
	"strings"
)

// Bounds of the grammar. Base and weight follow the ECS capacity provider strategy.
const (
	MaxTerms  = 20
	MaxBase   = 100000
	MaxWeight = 1000
	// MaxLength bounds the annotation value so that a pathological string is refused
	// before any work is done on it.
	MaxLength = 8192
	// MaxSeat is the highest seat the sequence is defined for. A StatefulSet's ordinals
	// are int32, so no real pod needs more; callers refuse a seat above it (a forged
	// pod-index label) instead of placing it, and seat arithmetic cannot overflow.
	MaxSeat = math.MaxInt32
)

// Reserved part keys inside a term.
const (
	keyBase   = "base"
	keyWeight = "weight"
)

// Label is one node label a term selects, kept in annotation order.
type Label struct {
	Key   string
	Value string
}

// Term is one capacity kind of a strategy: the node labels its pods select, how many
// pods it takes before any weighting (Base), and its share of the rest (Weight).
type Term struct {
	Labels []Label
	Base   int
	Weight int
}

// Strategy is a parsed, validated CustomPodScheduleStrategy. Its zero value has no terms;
// use Parse to build one. A Strategy from Parse is safe for concurrent use and must not
// be modified: it caches the terms of its first seats.
type Strategy struct {
	Terms []Term
	// Warnings lists what makes the strategy valid but doubtful, e.g. a term whose
	// labels contain another term's (a pod of the larger matches both). Shown to users
	// wherever the strategy is read: admission, apply-time validation, plan.
	Warnings []string

	prefix *prefixCache // nil on a hand-built Strategy: every seat is computed
}

// LabelMap returns the term's labels as a map, the shape of a pod's nodeSelector.
func (t Term) LabelMap() map[string]string {
	m := make(map[string]string, len(t.Labels))
	for _, l := range t.Labels {
		m[l.Key] = l.Value
	}
	return m
}

// SelectedBy reports whether a nodeSelector carries every label of the term, so that a
// pod with it lands only on the term's capacity.
func (t Term) SelectedBy(nodeSelector map[string]string) bool {
	for _, l := range t.Labels {
		if v, ok := nodeSelector[l.Key]; !ok || v != l.Value {
			return false
		}
	}
	return true
}

// selectedByLabel is SelectedBy over a look-up of the nodeSelector's labels.
func (t Term) selectedByLabel(label func(key string) (string, bool)) bool {
	for _, l := range t.Labels {
		if v, ok := label(l.Key); !ok || v != l.Value {
			return false
		}
	}
	return true
}

// LabelString renders the term's labels as "k=v,k2=v2" in annotation order.
func (t Term) LabelString() string {
	parts := make([]string, len(t.Labels))
	for i, l := range t.Labels {
		parts[i] = l.Key + "=" + l.Value
	}
	return strings.Join(parts, ",")
}

// String renders the term in canonical form, with base and weight always spelled out.
func (t Term) String() string {
	return fmt.Sprintf("%s,base=%d,weight=%d", t.LabelString(), t.Base, t.Weight)
}

// String renders the strategy in canonical form; Parse(s.String()) yields an equal strategy.
func (s *Strategy) String() string {
	parts := make([]string, len(s.Terms))
	for i, t := range s.Terms {
		parts[i] = t.String()
	}
	return strings.Join(parts, ":")
}
