package karpenter

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// awsWellKnownLabels returns the labels the Karpenter AWS provider
// (karpenter-provider-aws) registers as well known at start-up. On EKS a pod
// may select on them even when a NodePool leaves them unconstrained, because
// Karpenter resolves them from the instance type it launches. This package
// does not import the provider (its init mutates Karpenter's globals), so the
// list is kept here.
func awsWellKnownLabels() []string {
	const aws = "karpenter.k8s.aws/"
	return []string{
		aws + "capacity-reservation-id",
		aws + "capacity-reservation-type",
		aws + "instance-hypervisor",
		aws + "instance-encryption-in-transit-supported",
		aws + "instance-category",
		aws + "instance-family",
		aws + "instance-generation",
		aws + "instance-size",
		aws + "instance-local-nvme",
		aws + "instance-cpu",
		aws + "instance-cpu-manufacturer",
		aws + "instance-cpu-sustained-clock-speed-mhz",
		aws + "instance-memory",
		aws + "instance-ebs-bandwidth",
		aws + "instance-network-bandwidth",
		aws + "instance-gpu-name",
		aws + "instance-gpu-manufacturer",
		aws + "instance-gpu-count",
		aws + "instance-gpu-memory",
		aws + "instance-accelerator-name",
		aws + "instance-accelerator-manufacturer",
		aws + "instance-accelerator-count",
		"topology.k8s.aws/zone-id",
		corev1.LabelWindowsBuild,
	}
}

// kwokWellKnownLabels returns the labels Karpenter's kwok test provider
// (sigs.k8s.io/karpenter/kwok, used by the local cluster) registers as well
// known. Pass them to NewMatcher when running against that provider.
func kwokWellKnownLabels() []string {
	const kwok = "karpenter.kwok.sh/"
	return []string{kwok + "instance-size", kwok + "instance-family", kwok + "instance-cpu", kwok + "instance-memory"}
}

// Matcher holds the rules that decide whether a NodePool, a node group or a
// node can carry a term. It is immutable and safe for concurrent use.
type Matcher struct {
	// wellKnown are the label keys a NodePool may leave undefined and still
	// serve, as Karpenter's provisioner allows (AllowUndefinedWellKnownLabels).
	wellKnown sets.Set[string]
}

// NewMatcher returns a Matcher whose well-known labels are Karpenter core's
// (karpenter.sh/nodepool, karpenter.sh/capacity-type, kubernetes.io/arch,
// kubernetes.io/os, node.kubernetes.io/instance-type, topology zone and
// region, ...), the AWS provider's (awsWellKnownLabels) and extra: labels
// that another cloud provider resolves itself (for Karpenter's kwok provider,
// kwokWellKnownLabels).
func NewMatcher(extra ...string) *Matcher {
	wk := sets.New[string](karpv1.WellKnownLabels.UnsortedList()...)
	wk.Insert(awsWellKnownLabels()...)
	wk.Insert(extra...)
	return &Matcher{wellKnown: wk}
}

// WellKnownLabels returns the sorted label keys a NodePool may leave
// undefined and still serve.
func (m *Matcher) WellKnownLabels() []string { return sets.List(m.wellKnown) }

// termRequirements are a term's labels as Karpenter requirements: a single value
// is "In [value]" (as NewLabelRequirements makes it), a set of values
// (strategy.SetSeparator) is "In [values...]". A NodePool or node group whose
// requirements are Compatible with them allows at least one value of each set.
func termRequirements(term map[string]string) scheduling.Requirements {
	reqs := scheduling.NewRequirements()
	for k, v := range term {
		reqs.Add(scheduling.NewRequirement(k, corev1.NodeSelectorOpIn, strategy.SplitValues(v)...))
	}
	return reqs
}

// NodePool returns nil when the NodePool can launch a node carrying every
// label of term (one value of each set), or an error saying why not (Karpenter's own message, e.g.
// `label "nodesize" does not have known values`). It does not look at the
// pool's readiness; see Catalog for that.
func (m *Matcher) NodePool(np *karpv1.NodePool, term map[string]string) error {
	reqs, err := nodePoolRequirements(np)
	if err != nil {
		return err
	}
	if err := reqs.Compatible(termRequirements(term), allowUndefined(m.wellKnown)); err != nil {
		return fmt.Errorf("nodepool %q: %w", np.Name, err)
	}
	return nil
}

// nodePoolRequirements builds the scheduling requirements of a NodePool the
// way Karpenter's provisioner builds a NodeClaimTemplate: the template's
// requirements, intersected with its labels, karpenter.sh/nodepool=<name>,
// the node class label (e.g. karpenter.k8s.aws/ec2nodeclass=<name>) and the
// registered/initialized labels every Karpenter node ends up with. A
// requirement Karpenter's API validation would reject (unknown operator, or a
// Gt/Lt/Gte/Lte without exactly one integer) is an error rather than a guess.
func nodePoolRequirements(np *karpv1.NodePool) (scheduling.Requirements, error) {
	if np == nil {
		return nil, fmt.Errorf("nil nodepool")
	}
	spec := np.Spec.Template.Spec
	selectors := make([]karpv1.NodeSelectorRequirementWithMinValues, 0, len(spec.Requirements))
	for _, r := range spec.Requirements {
		if err := checkRequirement(r); err != nil {
			return nil, fmt.Errorf("nodepool %q: %w", np.Name, err)
		}
		// Karpenter may rewrite values in place while normalizing; the pool
		// usually lives in an informer cache, so it gets a copy.
		r.Values = append([]string(nil), r.Values...)
		selectors = append(selectors, r)
	}
	labels := make(map[string]string, len(np.Spec.Template.Labels)+4)
	for k, v := range np.Spec.Template.Labels {
		labels[k] = v
	}
	labels[karpv1.NodePoolLabelKey] = np.Name
	if ref := spec.NodeClassRef; ref != nil && ref.Kind != "" && ref.Name != "" {
		labels[karpv1.NodeClassLabelKey(ref.GroupKind())] = ref.Name
	}
	labels[karpv1.NodeRegisteredLabelKey] = "true"
	labels[karpv1.NodeInitializedLabelKey] = "true"

	reqs := scheduling.NewRequirements()
	reqs.Add(scheduling.NewNodeSelectorRequirementsWithMinValues(selectors...).Values()...)
	reqs.Add(scheduling.NewLabelRequirements(labels).Values()...)
	return reqs, nil
}

// checkRequirement rejects what Karpenter's CRD validation rejects and its
// requirement code assumes away (it indexes Values[0] for bounds).
func checkRequirement(r karpv1.NodeSelectorRequirementWithMinValues) error {
	if !karpv1.SupportedNodeSelectorOps.Has(string(r.Operator)) {
		return fmt.Errorf("requirement %q has unsupported operator %q", r.Key, r.Operator)
	}
	switch r.Operator {
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt, karpv1.NodeSelectorOpGte, karpv1.NodeSelectorOpLte:
		if len(r.Values) != 1 {
			return fmt.Errorf("requirement %q %s needs exactly one value, has %d", r.Key, r.Operator, len(r.Values))
		}
		if _, err := strconv.Atoi(r.Values[0]); err != nil {
			return fmt.Errorf("requirement %q %s needs an integer value, has %q", r.Key, r.Operator, r.Values[0])
		}
	}
	return nil
}

// NodeGroup returns nil when every node of the EKS managed node group carries
// (or, for what the group cannot report, may carry) every label of term. The
// group's labels include eks.amazonaws.com/nodegroup and
// eks.amazonaws.com/capacityType; node.kubernetes.io/instance-type is one of
// its instance types; Karpenter's labels (karpenter.sh/capacity-type, ...)
// are never on its nodes.
func (m *Matcher) NodeGroup(g nodegroups.Group, term map[string]string) error {
	reqs := scheduling.NewLabelRequirements(g.Labels)
	// Every node of a group carries these, but DescribeNodegroup does not tell
	// their values (the zone depends on the subnet each node lands in), so a
	// group may serve them.
	undefinedOK := sets.New(corev1.LabelTopologyZone, corev1.LabelTopologyRegion, "topology.k8s.aws/zone-id")
	if len(g.InstanceTypes) > 0 {
		reqs.Add(scheduling.NewRequirement(corev1.LabelInstanceTypeStable, corev1.NodeSelectorOpIn, g.InstanceTypes...))
	} else {
		undefinedOK.Insert(corev1.LabelInstanceTypeStable)
	}
	for _, k := range []string{corev1.LabelArchStable, corev1.LabelOSStable} {
		if !reqs.Has(k) {
			undefinedOK.Insert(k)
		}
	}
	if err := reqs.Compatible(termRequirements(term), allowUndefined(undefinedOK)); err != nil {
		return fmt.Errorf("node group %q: %w", g.Name, err)
	}
	return nil
}

// Node returns nil when the node's labels carry every label of term (a value of
// each set). This is
// Karpenter's existing-node check (no undefined label allowed) specialised to
// single values on both sides, which reduces to equality after Karpenter's
// key normalisation (beta.kubernetes.io/arch is kubernetes.io/arch, ...); it
// allocates nothing because it runs for every node on every admission.
func (m *Matcher) Node(nodeLabels, term map[string]string) error {
	for k, want := range term {
		key := normalizedKey(k)
		got, ok := nodeLabels[key]
		if !ok {
			got, ok = aliasValue(nodeLabels, key)
		}
		if !ok {
			return fmt.Errorf("node has no label %q", key)
		}
		if !strategy.AdmitsValue(k, want, got) {
			return fmt.Errorf("node label %s=%s, want %s", key, got, want)
		}
	}
	return nil
}

func normalizedKey(k string) string {
	if n, ok := karpv1.NormalizedLabels[k]; ok {
		return n
	}
	return k
}

// aliasValue finds a deprecated alias of key on the node (old nodes may carry
// only failure-domain.beta.kubernetes.io/zone, for instance).
func aliasValue(labels map[string]string, key string) (string, bool) {
	for alias, target := range karpv1.NormalizedLabels {
		if target != key {
			continue
		}
		if v, ok := labels[alias]; ok {
			return v, true
		}
	}
	return "", false
}

// allowUndefined is scheduling.AllowUndefinedWellKnownLabels with our own set,
// so Karpenter's package-level WellKnownLabels is never modified.
func allowUndefined(keys sets.Set[string]) func(*scheduling.CompatibilityOptions) {
	return func(o *scheduling.CompatibilityOptions) { o.AllowUndefined = keys }
}
