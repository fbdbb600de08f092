package plan

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// OfflineOptions say what ProjectOffline assumes of nodes it cannot see.
type OfflineOptions struct {
	// InstanceType is the instance type of terms that select none
	// (node.kubernetes.io/instance-type); empty leaves such terms unpriced.
	InstanceType string
	// Region is the region of terms that select no zone or region.
	Region string
	// PodsPerNode is how many pods share one node: each pod is charged 1/PodsPerNode
	// of its node's price (1 when below 1: a node per pod, an upper bound).
	PodsPerNode int
}

// ProjectOffline prices a strategy at replicas without a cluster (plan --cost without
// --cluster): each term's pods on the instance type its labels select (or
// o.InstanceType), bought as the capacity type its labels select, each pod charged
// 1/o.PodsPerNode of a node. A term whose instance type or capacity type cannot be
// told is named unpriced with the reason. It never fails.
func ProjectOffline(ctx context.Context, s *strategy.Strategy, replicas int, o OfflineOptions, prices pricing.Source) ([]*Projection, *Totals) {
	if o.PodsPerNode < 1 {
		o.PodsPerNode = 1
	}
	memo := pricing.NewMemo(prices)
	targets := s.Target(replicas)
	out := make([]*Projection, len(s.Terms))
	for i, t := range s.Terms {
		out[i] = offlineTerm(ctx, memo, t.LabelMap(), targets[i], o)
	}
	return out, totalize(out)
}

// offlineTerm prices one term's pods on the one offering its labels name.
func offlineTerm(ctx context.Context, prices pricing.Source, labels map[string]string, pods int, o OfflineOptions) *Projection {
	p := &Projection{Pods: pods, Unpriced: []string{}}
	key, err := offlineKey(labels, o)
	if err != nil {
		p.Unpriced = append(p.Unpriced, err.Error())
		return p
	}
	onDemandKey := key
	onDemandKey.CapacityType = pricing.OnDemand
	od, err := prices.Price(ctx, onDemandKey)
	if err != nil {
		p.Unpriced = append(p.Unpriced, err.Error())
		return p
	}
	v := od
	if key.CapacityType != pricing.OnDemand {
		if v, err = prices.Price(ctx, key); err != nil {
			p.Unpriced = append(p.Unpriced, err.Error())
			return p
		}
	}
	perPod := 1 / float64(o.PodsPerNode)
	p.CheapestUSDPerHour = round4(v * perPod * float64(pods))
	p.MedianUSDPerHour = p.CheapestUSDPerHour
	p.OnDemandMedianUSDPerHour = round4(od * perPod * float64(pods))
	p.CheapestOffering, p.Offerings = key.InstanceType+" "+key.CapacityType, 1
	return p
}

// offlineKey is the price a term's labels name: instance type, capacity type, zone or
// region.
func offlineKey(labels map[string]string, o OfflineOptions) (pricing.Key, error) {
	k := pricing.Key{
		InstanceType: firstLabel(labels, corev1.LabelInstanceTypeStable, corev1.LabelInstanceType),
		Region:       firstLabel(labels, corev1.LabelTopologyRegion),
		Zone:         firstLabel(labels, corev1.LabelTopologyZone),
	}
	if k.InstanceType == "" {
		k.InstanceType = o.InstanceType
	}
	if k.Region == "" {
		k.Region = o.Region
	}
	if k.InstanceType == "" {
		return k, fmt.Errorf("no instance type: the term selects no %s and --instance-type is not given", corev1.LabelInstanceTypeStable)
	}
	capacity := firstLabel(labels, karpv1.CapacityTypeLabelKey, nodegroups.LabelCapacityType)
	if capacity == "" {
		return k, fmt.Errorf("no capacity type: the term selects neither %s nor %s, so spot cannot be told from on-demand", karpv1.CapacityTypeLabelKey, nodegroups.LabelCapacityType)
	}
	k.CapacityType = pricing.NormalizeCapacityType(capacity)
	if err := k.Validate(); err != nil {
		return k, err
	}
	return k, nil
}

func firstLabel(labels map[string]string, keys ...string) string {
	for _, k := range keys {
		if v := labels[k]; v != "" {
			return v
		}
	}
	return ""
}

// totalize adds projections up and compares the median with all pods on-demand.
func totalize(projections []*Projection) *Totals {
	totals := &Totals{}
	for _, p := range projections {
		totals.CheapestUSDPerHour += p.CheapestUSDPerHour
		totals.MedianUSDPerHour += p.MedianUSDPerHour
		totals.OnDemandMedianUSDPerHour += p.OnDemandMedianUSDPerHour
	}
	totals.SavingUSDPerHour = round4(totals.OnDemandMedianUSDPerHour - totals.MedianUSDPerHour)
	if totals.OnDemandMedianUSDPerHour > 0 {
		totals.SavingPercent = roundPercent(totals.SavingUSDPerHour / totals.OnDemandMedianUSDPerHour)
	}
	totals.CheapestUSDPerHour, totals.MedianUSDPerHour = round4(totals.CheapestUSDPerHour), round4(totals.MedianUSDPerHour)
	totals.OnDemandMedianUSDPerHour = round4(totals.OnDemandMedianUSDPerHour)
	return totals
}
