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
	"slices"
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

// Label is one node label a term selects, kept in annotation order. Value is one
// label value, or a set of values joined by SetSeparator ("reserved|on-demand"): '|'
// is not allowed in a Kubernetes label value, so the two forms cannot be confused.
type Label struct {
	Key   string
	Value string
}

// SetSeparator separates the values of a label part that accepts a set of values.
const SetSeparator = "|"

// CapacityTypeLabel is Karpenter's capacity type label; its reserved value is capacity
// already paid for (On-Demand Capacity Reservations, Capacity Blocks).
const CapacityTypeLabel = "karpenter.sh/capacity-type"

// ReservationIDLabel names the capacity reservation (or Capacity Block) a node runs in
// (Karpenter's AWS provider).
const ReservationIDLabel = "karpenter.k8s.aws/capacity-reservation-id"

// Values returns the label's values: one for a single value, several for a set.
func (l Label) Values() []string { return SplitValues(l.Value) }

// IsSet reports whether the label accepts a set of values.
func (l Label) IsSet() bool { return strings.Contains(l.Value, SetSeparator) }

// SplitValues splits a term's label value (single or set) into its values.
func SplitValues(v string) []string { return strings.Split(v, SetSeparator) }

// Admits reports whether a pod (or node) whose label key is have (a single value, or
// a set joined by SetSeparator, as PlacementSelector reads a pod's required node
// affinity) is on this label: every value of have is one of the label's. A pod whose
// on-demand term was widened to accept reserved capacity (on-demand|reserved) still
// counts for the on-demand term.
func (l Label) Admits(have string) bool {
	return AdmitsValue(l.Key, l.Value, have)
}

// AdmitsValue is Label.Admits for a key and a term value (single or set).
func AdmitsValue(key, want, have string) bool {
	if want == have {
		return true
	}
	if !strings.Contains(have, SetSeparator) && !strings.Contains(want, SetSeparator) {
		return false
	}
	wants := SplitValues(want)
	haves := SplitValues(have)
	for _, v := range haves {
		if slices.Contains(wants, v) {
			continue
		}
		if len(haves) > 1 && key == CapacityTypeLabel && v == CapacityReserved && slices.Contains(wants, CapacityOnDemand) {
			continue
		}
		return false
	}
	return true
}

// Karpenter's capacity type values that reservations concern.
const (
	CapacityOnDemand = "on-demand"
	CapacityReserved = "reserved"
)

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

// LabelMap returns the term's labels as a map, the shape of a pod's nodeSelector; a
// set's value keeps its SetSeparator form, which readers split with SplitValues.
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
		if v, ok := nodeSelector[l.Key]; !ok || !l.Admits(v) {
			return false
		}
	}
	return true
}

// selectedByLabel is SelectedBy over a look-up of the nodeSelector's labels.
func (t Term) selectedByLabel(label func(key string) (string, bool)) bool {
	for _, l := range t.Labels {
		if v, ok := label(l.Key); !ok || !l.Admits(v) {
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
