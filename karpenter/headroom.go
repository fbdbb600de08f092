package karpenter

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// ListNodePools lists the cluster's NodePools once, typed and sorted by name.
func ListNodePools(ctx context.Context, dyn dynamic.Interface) ([]*karpv1.NodePool, error) {
	list, err := dyn.Resource(nodePoolGVR()).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list NodePools: %w", err)
	}
	out := make([]*karpv1.NodePool, 0, len(list.Items))
	for i := range list.Items {
		obj, err := toNodePool(&list.Items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, obj.(*karpv1.NodePool))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// NodePoolUsable reports whether Karpenter may launch nodes for the pool: not being
// deleted, and not reported not Ready (the filter Catalog.Serving applies).
func NodePoolUsable(np *karpv1.NodePool) bool { return nodePoolUsable(np) }

// Headroom is how many more pods of one set of requests a NodePool's limits let it
// launch nodes for: the limits minus status.resources, per resource the pod requests.
// It counts capacity for new nodes only; room on the pool's existing nodes is extra.
type Headroom struct {
	// Unlimited is true when no limit bounds the pods (the pool has no limits, or
	// none on a resource the pods request).
	Unlimited bool `json:"unlimited"`
	// Pods is how many pods fit under the limits (when not Unlimited).
	Pods int `json:"pods"`
	// Bound names the resource that runs out first, e.g. "cpu".
	Bound corev1.ResourceName `json:"bound,omitempty"`
	// Left is what is left of that resource under its limit, e.g. "2500m".
	Left string `json:"left,omitempty"`
}

// NodePoolHeadroom computes the headroom of np for pods requesting requests. A limit on
// nodes counts only once it is used up (pods per node depend on the instance type).
func NodePoolHeadroom(np *karpv1.NodePool, requests corev1.ResourceList) Headroom {
	h := Headroom{Unlimited: true}
	names := make([]string, 0, len(np.Spec.Limits))
	for name := range np.Spec.Limits {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, n := range names {
		name := corev1.ResourceName(n)
		left := np.Spec.Limits[name].DeepCopy()
		left.Sub(np.Status.Resources[name])
		if left.Sign() < 0 {
			left = resource.Quantity{}
		}
		var fit int64
		switch req, ok := requests[name]; {
		case name == corev1.ResourcePods:
			fit = left.Value()
		case name == "nodes":
			if left.Sign() > 0 {
				continue
			}
		case !ok || req.Sign() <= 0:
			continue
		default:
			fit = left.MilliValue() / req.MilliValue()
		}
		if h.Unlimited || fit < int64(h.Pods) {
			h = Headroom{Pods: int(fit), Bound: name, Left: left.String()}
		}
	}
	return h
}

// Offerings returns what a NodePool may launch for pods that select term: the instance
// types and capacity types its requirements, narrowed by the term, allow. nil means
// unconstrained (Karpenter may pick any type the cloud provider offers).
func Offerings(np *karpv1.NodePool, term map[string]string) (instanceTypes, capacityTypes []string, err error) {
	reqs, err := nodePoolRequirements(np)
	if err != nil {
		return nil, nil, err
	}
	narrowed := scheduling.NewRequirements(reqs.Values()...)
	for k, v := range term {
		key := normalizedKey(k)
		r := scheduling.NewRequirement(key, corev1.NodeSelectorOpIn, strategy.SplitValues(v)...)
		if narrowed.Has(key) {
			r = narrowed.Get(key).Intersection(r)
		}
		narrowed.Add(r)
	}
	return finite(narrowed, corev1.LabelInstanceTypeStable), finite(narrowed, karpv1.CapacityTypeLabelKey), nil
}

// finite returns the values of an In requirement on key, sorted; nil otherwise.
func finite(reqs scheduling.Requirements, key string) []string {
	if !reqs.Has(key) {
		return nil
	}
	r := reqs.Get(key)
	if r.Operator() != corev1.NodeSelectorOpIn {
		return nil
	}
	v := r.Values()
	sort.Strings(v)
	return v
}
