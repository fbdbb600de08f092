package clusterview

import (
	"time"
	"unique"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// PlacedPod is what the pod cache holds of a placed pod, as a value: it shares no
// storage with the cache or with another pod, so a reader may keep it as long as it
// likes. (A *corev1.Pod view whose maps are reused for the next pod let kept copies
// read another pod's readiness and annotations.)
type PlacedPod struct {
	Name, Namespace string
	UID             types.UID
	// Seat, Term and FallbackFrom are the pod's seat annotations, 1-based; 0 where the
	// annotation is missing or unreadable.
	Seat, Term, FallbackFrom int
	NodeName                 string
	Phase                    corev1.PodPhase
	Created                  time.Time
	Terminating              bool // a deletion timestamp is set
	Ready                    bool // condition Ready is True
	// DoNotDisrupt: the pod carries karpenter.sh/do-not-disrupt: "true"; the loop
	// never evicts it, its seat counts as held where it is.
	DoNotDisrupt bool
	// Unschedulable is the reason of a PodScheduled False condition ("": none), which
	// holds since UnschedulableSince (zero when the API server gave no time).
	Unschedulable      string
	UnschedulableSince time.Time
	// CannotRun: admission found that the pod's term offers no architecture its images
	// support (strategy.AnnotationCannotRun).
	CannotRun bool
	// CPUMilli and MemoryBytes are the pod's requests as the scheduler and Karpenter
	// count them (0: none).
	CPUMilli, MemoryBytes int64
	// nodeSelector in encodeSelector's form: a string, immutable, so the value can
	// be kept without copying a map.
	nodeSelector string
}

// Placed reports whether the pod carries a seat.
func (p PlacedPod) Placed() bool { return p.Seat > 0 }

// HoldsSeat reports whether the pod occupies its seat: terminating, failed and
// succeeded pods do not (strategy.HoldsSeat).
func (p PlacedPod) HoldsSeat() bool {
	return !p.Terminating && p.Phase != corev1.PodFailed && p.Phase != corev1.PodSucceeded
}

// IsReady reports whether the pod is Running, not terminating, and Ready.
func (p PlacedPod) IsReady() bool {
	return p.Phase == corev1.PodRunning && !p.Terminating && p.Ready
}

// UnschedulableFor returns since when the pod, Pending without a node, has been found
// unschedulable by the scheduler (its creation when the condition has no time).
func (p PlacedPod) UnschedulableFor() (time.Time, bool) {
	if p.Phase != corev1.PodPending || p.NodeName != "" || p.Terminating || p.Unschedulable != corev1.PodReasonUnschedulable {
		return time.Time{}, false
	}
	if p.UnschedulableSince.IsZero() {
		return p.Created, true
	}
	return p.UnschedulableSince, true
}

// TermIn is the 0-based term of s the pod is on (strategy.TermOf), -1 when none.
func (p PlacedPod) TermIn(s *strategy.Strategy) int {
	return strategy.TermOfPlaced(s, p.Term, p.NodeSelectorLabel)
}

// Live is what strategy.Tally counts of the pod against s.
func (p PlacedPod) Live(s *strategy.Strategy) strategy.LivePod {
	return strategy.LivePod{Seat: p.Seat, Term: p.TermIn(s), CannotRun: p.CannotRun}
}

// Judge tallies the pods each yields that hold a seat (live: not terminating, not
// finished) against s for replicas and judges them (strategy.Judge): the convergence
// loop and the policy status count with it, and spread with the same strategy.Tally.Add.
func Judge(s *strategy.Strategy, replicas int, each func(fn func(PlacedPod)), c strategy.Conditions) strategy.Verdict {
	t := strategy.NewTally(replicas, len(s.Terms))
	each(func(p PlacedPod) {
		if p.HoldsSeat() {
			t.Add(p.Live(s))
		}
	})
	return strategy.Judge(s, t, c)
}

// NodeSelectorLabel returns the value of key in the pod's nodeSelector (NodeSelector's form).
func (p PlacedPod) NodeSelectorLabel(key string) (string, bool) {
	var (
		got   string
		found bool
	)
	eachSelectorLabel(p.nodeSelector, func(k, v string) bool {
		if k == key {
			got, found = v, true
		}
		return !found
	})
	return got, found
}

// NodeSelector returns the pod's nodeSelector in a map of its own (nil when empty), as
// strategy.PlacementSelector reads it: a required node affinity "In" that every term
// carries appears as its values joined by strategy.SetSeparator.
func (p PlacedPod) NodeSelector() map[string]string {
	if p.nodeSelector == "" {
		return nil
	}
	m := map[string]string{}
	decodeSelector(p.nodeSelector, m)
	return m
}

// PlacedPodOf is the PlacedPod of a pod read from the API server (for pods the cache
// does not hold: those admitted without a seat).
func PlacedPodOf(pod *corev1.Pod) PlacedPod {
	p, _ := trimPod(pod)
	return p.(*cachedPod).placed()
}

// placed is p as a PlacedPod.
func (p *cachedPod) placed() PlacedPod {
	placement, status := p.placementOf(), p.statusOf()
	out := PlacedPod{
		Name: p.name, Namespace: p.namespace(), UID: p.uid,
		Seat: p.seatNumber(), Term: positive(placement.term), FallbackFrom: positive(placement.fallbackFrom),
		NodeName: value(p.nodeName), Phase: status.phase,
		Terminating: p.deletion != nil, Ready: p.ready, DoNotDisrupt: p.doNotDisrupt,
		Unschedulable: status.unschedulable, nodeSelector: placement.nodeSelector, CannotRun: placement.cannotRun,
	}
	if p.requests != (unique.Handle[podRequests]{}) {
		r := p.requests.Value()
		out.CPUMilli, out.MemoryBytes = r.cpuMilli, r.memoryBytes
	}
	if t := p.createdTime(); !t.IsZero() {
		out.Created = t.Time
	}
	if t := p.unschedulableSinceTime(); !t.IsZero() {
		out.UnschedulableSince = t.Time
	}
	return out
}

// positive is the number an annotation holds, 0 unless it is a positive integer. It
// parses by hand: strconv's error for the many empty annotations is an allocation per
// pod and pass.
func positive(s string) int {
	if s == "" || len(s) > 9 {
		return 0
	}
	n := 0
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}
