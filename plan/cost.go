package plan

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
)

// Projection is what a term's pods at MaxReplicas would cost per hour on the instance
// types its NodePools and node groups offer: each pod charged its share of a node
// (report.Share), on the cheapest offering and on the median one.
type Projection struct {
	Pods int `json:"pods"`
	// CheapestUSDPerHour and MedianUSDPerHour price the pods; OnDemandMedianUSDPerHour
	// prices them on-demand on the median of the same instance types.
	CheapestUSDPerHour       float64 `json:"cheapestUsdPerHour"`
	CheapestOffering         string  `json:"cheapestOffering"`
	MedianUSDPerHour         float64 `json:"medianUsdPerHour"`
	OnDemandMedianUSDPerHour float64 `json:"onDemandMedianUsdPerHour"`
	// Offerings counts the instance type and capacity type pairs priced.
	Offerings int `json:"offerings"`
	// Unpriced says which offerings were left out, and why.
	Unpriced []string `json:"unpriced,omitempty"`
}

// Totals adds the terms' projections up; Saving compares the median with all pods
// on-demand.
type Totals struct {
	CheapestUSDPerHour       float64 `json:"cheapestUsdPerHour"`
	MedianUSDPerHour         float64 `json:"medianUsdPerHour"`
	OnDemandMedianUSDPerHour float64 `json:"onDemandMedianUsdPerHour"`
	SavingUSDPerHour         float64 `json:"savingUsdPerHour"`
	SavingPercent            float64 `json:"savingPercent"`
}

type offering struct{ instanceType, capacityType string }

// Project prices every term of r (computed from in and c). Offerings come from the
// requirements of the serving NodePools narrowed by the term (karpenter.Offerings) and
// the node groups' instance types; a type is sized by a live node of that type. It
// never fails: what cannot be priced is named in Unpriced.
func Project(ctx context.Context, in Input, c Capacity, r *Result, prices pricing.Source) {
	memo := pricing.NewMemo(prices)
	projections := make([]*Projection, len(r.Terms))
	for i := range r.Terms {
		t := &r.Terms[i]
		offers, unpriced := termOfferings(c, t)
		p := price(ctx, memo, offers, c.Nodes, in.Requests, t.TargetMax)
		p.Unpriced = append(unpriced, p.Unpriced...)
		t.Cost, projections[i] = p, p
	}
	r.Cost = totalize(projections)
}

// termOfferings lists what the term's capacity may launch.
func termOfferings(c Capacity, t *Term) ([]offering, []string) {
	seen := map[offering]bool{}
	var out []offering
	var unpriced []string
	add := func(types, capacities []string) {
		for _, it := range types {
			for _, ct := range capacities {
				o := offering{it, pricing.NormalizeCapacityType(ct)}
				if !seen[o] {
					seen[o] = true
					out = append(out, o)
				}
			}
		}
	}
	serves := map[string]bool{}
	for _, p := range t.NodePools {
		serves[p.Name] = true
	}
	for _, np := range c.NodePools {
		if !serves[np.Name] {
			continue
		}
		types, capacities, err := karpenter.Offerings(np, t.Labels)
		switch {
		case err != nil:
			unpriced = append(unpriced, fmt.Sprintf("NodePool %s: %v", np.Name, err))
		case types == nil:
			unpriced = append(unpriced, fmt.Sprintf("NodePool %s: its instance types are not constrained (no %s In requirement)", np.Name, corev1.LabelInstanceTypeStable))
		default:
			if capacities == nil {
				capacities = []string{karpv1.CapacityTypeOnDemand}
			}
			add(types, capacities)
		}
	}
	for _, gr := range t.NodeGroups {
		for _, g := range c.NodeGroups {
			if g.Name == gr.Name {
				add(g.InstanceTypes, []string{g.CapacityType})
			}
		}
	}
	return out, unpriced
}

// price charges pods pods on each offering and summarizes.
func price(ctx context.Context, prices pricing.Source, offers []offering, nodes []corev1.Node, requests corev1.ResourceList, pods int) *Projection {
	p := &Projection{Pods: pods, Unpriced: []string{}}
	perPod, onDemandPerPod := map[string]float64{}, map[string]float64{}
	for _, o := range offers {
		alloc := allocatableOf(nodes, o.instanceType)
		if alloc == nil {
			p.Unpriced = append(p.Unpriced, fmt.Sprintf("%s: no node of this type to size it", o.instanceType))
			continue
		}
		share := report.Share(requests, alloc)
		od, err := prices.Price(ctx, pricing.Key{InstanceType: o.instanceType, CapacityType: pricing.OnDemand})
		if err != nil {
			p.Unpriced = append(p.Unpriced, err.Error())
			continue
		}
		v := od
		if o.capacityType != pricing.OnDemand {
			if v, err = prices.Price(ctx, pricing.Key{InstanceType: o.instanceType, CapacityType: o.capacityType}); err != nil {
				p.Unpriced = append(p.Unpriced, err.Error())
				continue
			}
		}
		perPod[o.instanceType+" "+o.capacityType] = v * share
		onDemandPerPod[o.instanceType] = od * share
	}
	sort.Strings(p.Unpriced)
	p.Unpriced = slices.Compact(p.Unpriced)
	if s, ok := pricing.Summarize(perPod); ok {
		p.CheapestUSDPerHour, p.CheapestOffering = round4(s.Cheapest*float64(pods)), s.CheapestType
		p.MedianUSDPerHour, p.Offerings = round4(s.Median*float64(pods)), s.Priced
	}
	if s, ok := pricing.Summarize(onDemandPerPod); ok {
		p.OnDemandMedianUSDPerHour = round4(s.Median * float64(pods))
	}
	return p
}

// allocatableOf is the allocatable of a live node of the instance type; nil when none.
func allocatableOf(nodes []corev1.Node, instanceType string) corev1.ResourceList {
	for i := range nodes {
		if nodes[i].Labels[corev1.LabelInstanceTypeStable] == instanceType && len(nodes[i].Status.Allocatable) > 0 {
			return nodes[i].Status.Allocatable
		}
	}
	return nil
}

func round4(v float64) float64 { return math.Round(v*1e4) / 1e4 }

// roundPercent is a fraction as a percentage to one decimal.
func roundPercent(f float64) float64 { return math.Round(1000*f) / 10 }
