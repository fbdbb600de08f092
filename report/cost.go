package report

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
)

// Cost is what pods cost per hour: their share of the price of the nodes they run on.
type Cost struct {
	USDPerHour float64 `json:"usdPerHour"`
	// OnDemandUSDPerHour is what the same pods would cost on the same instance types
	// bought on-demand.
	OnDemandUSDPerHour float64 `json:"onDemandUsdPerHour"`
	// SavingUSDPerHour is OnDemandUSDPerHour minus USDPerHour; SavingPercent its part
	// of OnDemandUSDPerHour.
	SavingUSDPerHour float64 `json:"savingUsdPerHour"`
	SavingPercent    float64 `json:"savingPercent"`
	// PricedPods counts the pods whose nodes had a price.
	PricedPods int `json:"pricedPods"`
	// Unpriced says which nodes had no price, and why; their pods are left out.
	Unpriced []string `json:"unpriced,omitempty"`
}

// requests are what a term's pods on one node request, summed: the two resources a
// node's share is read from.
type requests struct{ cpuMilli, memoryBytes int64 }

// list is r as the ResourceList Share reads.
func (r requests) list() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(r.cpuMilli, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(r.memoryBytes, resource.BinarySI),
	}
}

// nodeReport describes a node a term's pods run on, with the share of it they request.
func nodeReport(n *corev1.Node, name string, pods int, requested corev1.ResourceList) NodeReport {
	r := NodeReport{Name: name, CapacityType: capacityType(n), Pods: pods}
	if n == nil {
		return r
	}
	r.InstanceType = n.Labels[corev1.LabelInstanceTypeStable]
	r.Region, r.Zone = n.Labels[corev1.LabelTopologyRegion], n.Labels[corev1.LabelTopologyZone]
	r.Share = Share(requested, n.Status.Allocatable)
	return r
}

// Share is the part of a node that requests take: the larger of their CPU and memory
// over the node's allocatable, at most 1 (0 when the node reports neither).
func Share(requests, allocatable corev1.ResourceList) float64 {
	share := 0.0
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		have, req := allocatable[name], requests[name]
		if have.Sign() <= 0 {
			continue
		}
		share = math.Max(share, req.AsApproximateFloat64()/have.AsApproximateFloat64())
	}
	return math.Min(share, 1)
}

// AddCost prices every workload's terms: each node's hourly price, on its capacity
// type and on-demand, times the share of it the term's pods request. A node that
// cannot be priced (no instance type label, an unknown type, AWS unreachable) is named
// in the term's Unpriced and left out; AddCost itself never fails.
func AddCost(ctx context.Context, r *Report, prices pricing.Source) {
	memo := pricing.NewMemo(prices)
	for wi := range r.Workloads {
		w := &r.Workloads[wi]
		if len(w.Terms) == 0 {
			continue
		}
		total := &Cost{}
		for ti := range w.Terms {
			t := &w.Terms[ti]
			t.Cost = termCost(ctx, memo, t.Nodes)
			total.USDPerHour += t.Cost.USDPerHour
			total.OnDemandUSDPerHour += t.Cost.OnDemandUSDPerHour
			total.PricedPods += t.Cost.PricedPods
			total.Unpriced = append(total.Unpriced, t.Cost.Unpriced...)
		}
		sort.Strings(total.Unpriced)
		total.Unpriced = slices.Compact(total.Unpriced)
		total.settle()
		w.Cost = total
	}
}

func termCost(ctx context.Context, prices pricing.Source, nodes []NodeReport) *Cost {
	c := &Cost{}
	for _, n := range nodes {
		price, onDemand, err := nodePrices(ctx, prices, n)
		if err != nil {
			c.Unpriced = append(c.Unpriced, fmt.Sprintf("node %s: %v", n.Name, err))
			continue
		}
		c.USDPerHour += price * n.Share
		c.OnDemandUSDPerHour += onDemand * n.Share
		c.PricedPods += n.Pods
	}
	c.settle()
	return c
}

// nodePrices is a node's hourly price on its capacity type, and on-demand.
func nodePrices(ctx context.Context, prices pricing.Source, n NodeReport) (price, onDemand float64, err error) {
	if n.InstanceType == "" {
		return 0, 0, errors.New("no " + corev1.LabelInstanceTypeStable + " label")
	}
	capacity := pricing.NormalizeCapacityType(n.CapacityType)
	if capacity == "" {
		capacity = pricing.OnDemand
	}
	key := pricing.Key{InstanceType: n.InstanceType, CapacityType: pricing.OnDemand, Region: n.Region, Zone: n.Zone}
	if onDemand, err = prices.Price(ctx, key); err != nil {
		return 0, 0, err
	}
	switch capacity {
	case pricing.OnDemand:
		return onDemand, onDemand, nil
	case pricing.Reserved:
		// A reservation is paid whether used or not: a pod on it adds nothing.
		return 0, onDemand, nil
	}
	key.CapacityType = capacity
	if price, err = prices.Price(ctx, key); err != nil {
		return 0, 0, err
	}
	return price, onDemand, nil
}

// settle rounds to a hundredth of a cent and computes the saving.
func (c *Cost) settle() {
	round := func(v float64) float64 { return math.Round(v*1e4) / 1e4 }
	c.USDPerHour, c.OnDemandUSDPerHour = round(c.USDPerHour), round(c.OnDemandUSDPerHour)
	c.SavingUSDPerHour = round(c.OnDemandUSDPerHour - c.USDPerHour)
	c.SavingPercent = 0
	if c.OnDemandUSDPerHour > 0 {
		c.SavingPercent = math.Round(1000*c.SavingUSDPerHour/c.OnDemandUSDPerHour) / 10
	}
}
