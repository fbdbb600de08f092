package karpenter

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// vocabulary is every label key the capacity offers, with the values it offers for
// it; a nil set means any value (a well-known label a NodePool leaves open, or a
// requirement such as Exists or NotIn).
type vocabulary map[string]sets.Set[string]

func (v vocabulary) add(key string, values ...string) {
	key = normalizedKey(key)
	known, seen := v[key]
	switch {
	case seen && known == nil:
	case len(values) == 0:
		v[key] = nil
	case !seen:
		v[key] = sets.New(values...)
	default:
		known.Insert(values...)
	}
}

// Serves tells whether any NodePool, node group or Ready node serves a term's labels.
func (c *Catalog) Serves(term map[string]string) bool {
	_, served := c.Tolerations(term)
	return served
}

// Unserved tells whether nothing serves a term's labels, and then the likely typo
// (Hint): policy status and its exact counts read it.
func (c *Catalog) Unserved(term map[string]string) (hint string, unserved bool) {
	if c.Serves(term) {
		return "", false
	}
	hint, _ = c.Hint(term)
	return hint, true
}

// Hint says, for a term nothing serves, which of its labels no NodePool, node group or
// node offers, and the closest key or value that is offered: the likely typo, e.g.
// `no capacity offers the label key "karpenter.sh/capcity-type"; did you mean
// "karpenter.sh/capacity-type"?`. Likely reports whether there is such a suggestion.
// "" when every label is offered on its own (they are not offered together).
func (c *Catalog) Hint(term map[string]string) (hint string, likely bool) {
	var groups []nodegroups.Group
	if c.groups != nil {
		groups = c.groups.Groups()
	}
	var nodes []*corev1.Node
	c.EachNode(func(n *corev1.Node) { nodes = append(nodes, n) })
	return hintFor(vocabularyOf(c.matcher, c.nodePools(), groups, nodes), term)
}

// vocabularyOf is what the given capacity offers.
func vocabularyOf(m *Matcher, pools []*karpv1.NodePool, groups []nodegroups.Group, nodes []*corev1.Node) vocabulary {
	v := vocabulary{}
	if len(pools) > 0 {
		// Karpenter resolves its well-known labels itself; the capacity type's values
		// are a closed set.
		for _, k := range m.WellKnownLabels() {
			if k != karpv1.CapacityTypeLabelKey {
				v.add(k)
			}
		}
		v.add(karpv1.CapacityTypeLabelKey, karpv1.CapacityTypeOnDemand, karpv1.CapacityTypeSpot, karpv1.CapacityTypeReserved)
	}
	for _, np := range pools {
		reqs, err := nodePoolRequirements(np)
		if err != nil {
			continue
		}
		for _, r := range reqs {
			if r.Operator() == corev1.NodeSelectorOpIn {
				v.add(r.Key, r.Values()...)
			} else {
				v.add(r.Key)
			}
		}
	}
	for _, g := range groups {
		for k, val := range g.Labels {
			v.add(k, val)
		}
		v.add(corev1.LabelTopologyZone)
		v.add(corev1.LabelInstanceTypeStable, g.InstanceTypes...)
	}
	for _, n := range nodes {
		for k, val := range n.Labels {
			v.add(k, val)
		}
	}
	return v
}

// hintFor is Hint over a vocabulary.
func hintFor(v vocabulary, term map[string]string) (string, bool) {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	labels := make([]string, 0, len(term))
	for k := range term {
		labels = append(labels, k)
	}
	sort.Strings(labels)
	var said []string
	likely := false
	for _, k := range labels {
		values, offered := v[normalizedKey(k)]
		switch {
		case !offered:
			msg := fmt.Sprintf("no NodePool, node group or node offers the label key %q", k)
			if want := strategy.Closest(k, keys); want != "" {
				msg, likely = msg+fmt.Sprintf("; did you mean %q?", want), true
			}
			said = append(said, msg)
		case values != nil && !values.HasAny(strategy.SplitValues(term[k])...):
			known := sets.List(values)
			msg := fmt.Sprintf("no NodePool, node group or node offers %s=%s (offered: %s)", k, term[k], firstValues(known))
			if want := strategy.Closest(term[k], known); want != "" {
				msg, likely = msg+fmt.Sprintf("; did you mean %s=%s?", k, want), true
			}
			said = append(said, msg)
		}
	}
	return strings.Join(said, "; "), likely
}

// firstValues lists up to 5 values, and how many more there are.
func firstValues(values []string) string {
	if len(values) <= 5 {
		return strings.Join(values, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(values[:5], ", "), len(values)-5)
}
