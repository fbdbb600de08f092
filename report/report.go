package report

// The report's shape: what `spread` prints (as text, JSON or YAML) for each workload,
// term and node. Build (build.go) fills it in.

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/utils/resources"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// Report is the `spread` document: one entry per workload that carries a strategy.
type Report struct {
	Workloads []WorkloadReport `json:"workloads"`
	// Stopped says why every move of the convergence loop is stopped ("": it is not).
	Stopped string `json:"stopped,omitempty"`
	// Unseen says what the report could not read (a user who may read only one
	// namespace cannot list nodes or NodePools) and what it leaves out for that.
	Unseen []string `json:"unseen,omitempty"`
}

// WorkloadReport compares a workload's current revision with the strategy's target.
type WorkloadReport struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Replicas  int    `json:"replicas"`
	// Revision is the ReplicaSet whose pods are counted (Deployments), or the
	// workload's own name.
	Revision string `json:"revision"`
	Strategy string `json:"strategy"`
	// Source names where the strategy came from: the pod template, the workload, a
	// policy ("PlacementPolicy shop/web-split") or the namespace default ("Namespace shop").
	Source string       `json:"source"`
	Error  string       `json:"error,omitempty"`
	Terms  []TermReport `json:"terms,omitempty"`
	// Unplaced counts live pods of the revision that carry no seat (created while the
	// webhook was unreachable, or with a conflicting nodeSelector).
	Unplaced int `json:"unplaced"`
	// OtherRevisions counts live pods of older ReplicaSets (a rollout in progress).
	OtherRevisions int `json:"otherRevisions"`
	// PendingRepairs counts pods the convergence loop still has to move: unplaced, on
	// another term than the (fallback) placement of their seat, or above the replica
	// count while a lower seat is free.
	PendingRepairs int `json:"pendingRepairs"`
	// Exact is true when every seat is on its own term (State is exact).
	Exact bool `json:"exact"`
	// State is strategy.Judge's word (exact, fallback, off-target), or not-enabled or
	// invalid; Why says what is not exact, in words a user acts on.
	State string `json:"state"`
	Why   string `json:"why,omitempty"`
	// NotEnabled says, when the API server does not send the workload's namespace to
	// the webhook (scope opt-in and the namespace not labelled, or excluded), that
	// nothing places its pods and how to enable it; such a workload is never Exact.
	NotEnabled string `json:"notEnabled,omitempty"`
	// Cost is the terms' costs added up; set by AddCost.
	Cost *Cost `json:"cost,omitempty"`
	// NoRevision says why no revision's pods are counted (a Rollout with no
	// ReplicaSet yet).
	NoRevision string `json:"noRevision,omitempty"`
	// Audit is set when a policy or namespace default in audit mode would govern the
	// workload if it were enforced: what it would change. A workload that only such a
	// source would govern is reported with State "audit" (nothing places its pods now).
	Audit *AuditReport `json:"audit,omitempty"`
	// Held says why the convergence loop moves none of its pods now: it opted out, its
	// policy is suspended, or moves are stopped in its namespace or everywhere.
	Held string `json:"held,omitempty"`
	// DoNotDisrupt counts the pods off their seat's term (or unplaced, or above the
	// replica count) that the loop leaves where they are: they carry Karpenter's
	// karpenter.sh/do-not-disrupt. They are not among PendingRepairs.
	DoNotDisrupt int `json:"doNotDisrupt,omitempty"`
	// WhatIf is set by a what-if (`plan --cluster -f policy.yaml`) when the edited
	// policy or namespace default changes the workload's source or strategy: what the
	// source it would then have would do (Source "": none; its pods stay where they are).
	WhatIf *AuditReport `json:"whatIf,omitempty"`
	// MoveWindow is the workload's move window from its annotation, its policy or the
	// cluster's MOVE_WINDOW ("schedule=...; duration=..."), and Waits says, while
	// repairs are pending, that its non-urgent moves wait for it.
	MoveWindow string `json:"moveWindow,omitempty"`
	Waits      string `json:"waits,omitempty"`
}

// AuditReport is what a source in audit mode, or a what-if's, would do to a workload.
type AuditReport struct {
	// Source names it ("PlacementPolicy shop/next", "Namespace shop").
	Source   string `json:"source"`
	Strategy string `json:"strategy"`
	// Target is its target per term of its strategy; Error its parser's message.
	Target []int  `json:"target,omitempty"`
	Error  string `json:"error,omitempty"`
	// WouldMove counts the pods enforcing it would move (strategy.Moves): pods whose
	// seat it places on another term, and seats no placed pod holds, less the pods
	// that carry karpenter.sh/do-not-disrupt (the loop never moves them).
	WouldMove int `json:"wouldMove"`
	// Pods names them: the pods on another term than it places their seat, then as many
	// unplaced pods as seats no placed pod holds (fewer when pods are missing).
	Pods []string `json:"pods,omitempty"`
	// Held says why the loop would move none of them (a what-if's suspended policy, or
	// moves stopped in the namespace).
	Held string `json:"held,omitempty"`
}

// TermReport is one term's row.
type TermReport struct {
	Term   int               `json:"term"`
	Labels map[string]string `json:"labels"`
	Target int               `json:"target"`
	// Expected is what the term should hold now: the target, or while some term is
	// unavailable, the fallback placement's count.
	Expected int `json:"expected"`
	// UnavailableUntil and UnavailableReason are set while the term is unavailable
	// (RFC 3339; its seats go to the fallback until then).
	UnavailableUntil  string `json:"unavailableUntil,omitempty"`
	UnavailableReason string `json:"unavailableReason,omitempty"`
	// FallbackPods counts live pods whose seat belongs to this term but that were
	// placed on another one because this term was unavailable.
	FallbackPods   int      `json:"fallbackPods"`
	Placed         int      `json:"placed"`
	Running        int      `json:"running"`
	Pending        int      `json:"pending"`
	PendingReasons []string `json:"pendingReasons,omitempty"`
	// CannotRun counts the term's pods whose images support none of the architectures
	// it offers (admission placed them on their seat and said so on the pod); such a
	// workload is not Exact. CannotRunReason is admission's word on the first of them.
	CannotRun       int          `json:"cannotRun,omitempty"`
	CannotRunReason string       `json:"cannotRunReason,omitempty"`
	ServedBy        []string     `json:"servedBy"`
	Nodes           []NodeReport `json:"nodes"`
	// ReservedPods counts the term's pods on reserved capacity (capacity reservations,
	// Capacity Blocks): already paid for, priced at nothing.
	ReservedPods int `json:"reservedPods,omitempty"`
	// IdleReserved is set while some of the term's pods run on on-demand nodes and
	// reserved nodes that carry its other labels have room for more of them.
	IdleReserved *IdleReserved `json:"idleReserved,omitempty"`
	// Cost is set by AddCost.
	Cost *Cost `json:"cost,omitempty"`
}

// NodeReport says how many of a term's pods run on one node, and its capacity type.
type NodeReport struct {
	Name         string `json:"name"`
	CapacityType string `json:"capacityType,omitempty"`
	Pods         int    `json:"pods"`
	// InstanceType, Region and Zone come from the node's well-known labels; Share is the
	// part of the node the term's pods request (the larger of CPU and memory over the
	// node's allocatable): what the pods are charged of the node's price.
	InstanceType string  `json:"instanceType,omitempty"`
	Region       string  `json:"region,omitempty"`
	Zone         string  `json:"zone,omitempty"`
	Share        float64 `json:"share,omitempty"`
}

// Policies gives a workload the strategy links of its policy and namespace default: a
// *policy.Index (listed) or serve's *policy.Cache (watched).
type Policies interface {
	AppendLinks(dst []strategy.AnnotatedObject, w policy.Workload) []strategy.AnnotatedObject
	// AppendAuditLinks is AppendLinks as if every source in audit mode were enforced.
	AppendAuditLinks(dst []strategy.AnnotatedObject, w policy.Workload) []strategy.AnnotatedObject
}

// Pod is what the report reads of one pod of a workload: a few values, so that a
// reader that keeps its pods in another form (serve's trimmed pod cache) need not make
// a corev1.Pod of each.
type Pod struct {
	Name string
	// Seat and FallbackFrom are the seat annotations (1-based; 0: none).
	Seat, FallbackFrom int
	// TermIndex is the 0-based term of the workload's strategy the pod is on
	// (strategy.TermOf); -1 when none, or the pod has no seat.
	TermIndex int
	// HoldsSeat: not terminating, not finished (strategy.HoldsSeat).
	HoldsSeat bool
	// DoNotDisrupt: karpenter.sh/do-not-disrupt is "true" (the loop never moves it).
	DoNotDisrupt bool
	Phase        corev1.PodPhase
	// PendingReason is the scheduler's word on a pending pod ("": none).
	PendingReason string
	// CannotRun is admission's word on a pod whose images its term cannot run.
	CannotRun string
	NodeName  string
	// CPUMilli and MemoryBytes are the pod's requests as Karpenter and the scheduler
	// count them (containers, sidecars, init containers, overhead): its share of a node.
	CPUMilli, MemoryBytes int64
}

// Live is what strategy.Tally counts of the pod.
func (p Pod) Live() strategy.LivePod {
	return strategy.LivePod{Seat: p.Seat, Term: p.TermIndex, CannotRun: p.CannotRun != ""}
}

// PodOf is the Pod of a pod read from the API server, on a term of s (nil: no term).
func PodOf(pod *corev1.Pod, s *strategy.Strategy) Pod {
	p := Pod{Name: pod.Name, HoldsSeat: strategy.HoldsSeat(pod), Phase: pod.Status.Phase, PendingReason: pendingReason(pod),
		CannotRun: pod.Annotations[strategy.AnnotationCannotRun], NodeName: pod.Spec.NodeName, TermIndex: -1,
		DoNotDisrupt: pod.Annotations[karpv1.DoNotDisruptAnnotationKey] == "true"}
	if seat, ok := strategy.SeatOf(pod); ok {
		p.Seat = seat
		if s != nil {
			p.TermIndex = strategy.TermOf(s, pod)
		}
	}
	p.FallbackFrom, _ = strconv.Atoi(pod.Annotations[strategy.AnnotationFallbackFrom])
	req := resources.Ceiling(pod).Requests
	p.CPUMilli, p.MemoryBytes = req.Cpu().MilliValue(), req.Memory().Value()
	return p
}
