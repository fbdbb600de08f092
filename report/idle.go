package report

// Idle reserved capacity: room left on reserved nodes (capacity reservations, Capacity
// Blocks) while a term's pods run on on-demand nodes beside them. Only what Kubernetes
// sees: a reservation's instances never launched are no nodes, and only EC2 knows them.

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/utils/resources"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// defaultMaxPods is the kubelet's pod limit for a node that reports none.
const defaultMaxPods = 110

// NodeUse is what the pods bound to a node request: CPU, memory, and how many they are.
type NodeUse struct {
	CPUMilli, MemoryBytes, Pods int64
}

// IdleReserved is reserved capacity standing idle while some of a term's pods run on
// on-demand nodes.
type IdleReserved struct {
	// Pods is how many more of the term's pods (at the largest requests among them) fit
	// in what the reserved nodes that carry the term's other labels have left.
	Pods int `json:"pods"`
	// OnDemandPods counts the term's pods on on-demand nodes.
	OnDemandPods int `json:"onDemandPods"`
	// Reservations names the reservations with room (karpenter.k8s.aws/capacity-reservation-id;
	// the node's name when it has none).
	Reservations []string `json:"reservations"`
	// AcceptsReserved says whether the term's pods may run on reserved capacity at all;
	// Hint says what would put the on-demand ones there.
	AcceptsReserved bool   `json:"acceptsReserved"`
	Hint            string `json:"hint"`
}

// ReadReservedUse lists, for each reserved node of nodes, what the pods bound to it
// request (one list per node, by field selector: reserved nodes are few). Finished
// pods hold nothing.
func ReadReservedUse(ctx context.Context, client kubernetes.Interface, nodes map[string]*corev1.Node) (map[string]NodeUse, error) {
	use := map[string]NodeUse{}
	for name, n := range nodes {
		if pricing.NormalizeCapacityType(capacityType(n)) != pricing.Reserved {
			continue
		}
		pods, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
			FieldSelector: "spec.nodeName=" + name + ",status.phase!=Succeeded,status.phase!=Failed"})
		if err != nil {
			return nil, fmt.Errorf("list the pods on reserved node %s: %w", name, err)
		}
		var u NodeUse
		for i := range pods.Items {
			req := resources.Ceiling(&pods.Items[i]).Requests
			u.CPUMilli += req.Cpu().MilliValue()
			u.MemoryBytes += req.Memory().Value()
			u.Pods++
		}
		use[name] = u
	}
	return use, nil
}

// idleReserved is the reserved room beside a term's onDemand pods of the given size
// (nil: none, or the nodes' use was not read).
func idleReserved(st *State, term strategy.Term, size requests, onDemand int) *IdleReserved {
	if onDemand == 0 || st.Used == nil {
		return nil
	}
	capacity, pinned := term.LabelMap()[strategy.CapacityTypeLabel]
	values := strategy.SplitValues(capacity)
	if pinned && !slices.Contains(values, strategy.CapacityOnDemand) {
		return nil
	}
	idle := &IdleReserved{OnDemandPods: onDemand, AcceptsReserved: !pinned || slices.Contains(values, strategy.CapacityReserved) ||
		st.OnDemandAcceptsReserved && capacity == strategy.CapacityOnDemand}
	for name, used := range st.Used {
		n := st.Nodes[name]
		if n == nil || !carries(n, term) || n.Spec.Unschedulable || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&karpv1.DisruptedNoScheduleTaint) }) {
			continue // not the term's, or taking no new pods
		}
		if fit := room(n.Status.Allocatable, used, size); fit > 0 {
			idle.Pods += int(fit)
			id := n.Labels[strategy.ReservationIDLabel]
			if id == "" {
				id = name
			}
			if !slices.Contains(idle.Reservations, id) {
				idle.Reservations = append(idle.Reservations, id)
			}
		}
	}
	if idle.Pods == 0 {
		return nil
	}
	slices.Sort(idle.Reservations)
	idle.Hint = "Karpenter fills a reservation only as it launches; running pods are not moved"
	switch {
	case idle.AcceptsReserved:
	case capacity == strategy.CapacityOnDemand:
		idle.Hint = "the term does not accept reserved (write reserved|on-demand or set ON_DEMAND_ACCEPTS_RESERVED=on)"
	default:
		idle.Hint = "the term does not accept reserved (add reserved to its set)"
	}
	return idle
}

// carries reports whether node n has every label of the term but its capacity type.
func carries(n *corev1.Node, term strategy.Term) bool {
	for _, l := range term.Labels {
		if l.Key == strategy.CapacityTypeLabel {
			continue
		}
		if v, ok := n.Labels[l.Key]; !ok || !l.Admits(v) {
			return false
		}
	}
	return true
}

// room is how many pods of size still fit in allocatable beside used; a resource the
// pods do not request does not bound it, the node's pod limit always does.
func room(allocatable corev1.ResourceList, used NodeUse, size requests) int64 {
	maxPods := int64(defaultMaxPods)
	if q, ok := allocatable[corev1.ResourcePods]; ok {
		maxPods = q.Value()
	}
	fit := maxPods - used.Pods
	if size.cpuMilli > 0 {
		fit = min(fit, (allocatable.Cpu().MilliValue()-used.CPUMilli)/size.cpuMilli)
	}
	if size.memoryBytes > 0 {
		fit = min(fit, (allocatable.Memory().Value()-used.MemoryBytes)/size.memoryBytes)
	}
	return max(fit, 0)
}
