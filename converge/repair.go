package converge

// Repair: which pods are off their seat's placement, and moving them through the
// Eviction API within the workload's budget of unavailable pods.

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// findUnplaced lists the revision's pods admitted without a seat (while the webhook was
// unreachable). They carry no managed label, so they are not cached: the revision's
// pods are listed only when the replica count says some pods are not among the placed
// ones, twice in a row (a burst being admitted). While the count stays short with
// nothing unplaced found (pods that cannot be created, a quota), at most every 10 s.
func (p *revPass) findUnplaced(ctx context.Context) []*corev1.Pod {
	l, uid := p.l, p.rev.uid
	if p.placedLive < p.rev.replicas {
		l.suspect[uid]++
	} else {
		delete(l.suspect, uid)
		delete(l.listed, uid)
	}
	last, listed := l.listed[uid]
	if l.suspect[uid] < 2 || (listed && p.now.Sub(last) < 10*time.Second) {
		return nil
	}
	unplaced, err := l.unplaced(ctx, p.rev)
	if err != nil {
		p.log.WithError(err).Warn("cannot list the revision's pods")
		p.res.failed = true
	}
	if len(unplaced) == 0 {
		l.listed[uid] = p.now
	}
	return unplaced
}

// planMoves looks at every live pod of the revision (the cached placed ones, then
// unplaced) and collects what should move: pods off their seat's term, unplaced pods,
// and pods whose seat is above the replica count while a seat below it is free.
func (p *revPass) planMoves(unplaced []*corev1.Pod) {
	p.above = map[int]*corev1.Pod{}
	p.landed, p.landing = map[int]bool{}, map[int]bool{}
	p.l.cfg.Caches.EachPodOf(p.cached, p.consider)
	for _, pod := range unplaced {
		p.consider(pod)
	}
	p.moveSeatsAbove()
	p.moves = p.l.canaryFirst(p.w, p.rev.uid, p.s, p.moves, p.landed, p.landing)
	if p.heldForFallback > 0 {
		p.l.blocked(p.w, p.rev.uid, fmt.Sprintf("%d stranded pods wait to move: their fallback term's own pods wait for capacity too", p.heldForFallback))
	}
}

// consider counts one live pod and adds its move, if it needs one.
func (p *revPass) consider(pod *corev1.Pod) {
	if !strategy.HoldsSeat(pod) {
		return
	}
	p.live++
	if isReady(pod) && !p.l.wasEvicted(pod) {
		p.ready++
	}
	p.noteReturn(pod)
	seat, ok := strategy.SeatOf(pod)
	if !ok {
		// A pod whose own nodeSelector contradicts a term was left unplaced on purpose;
		// its replacement would be too, so moving it would only churn.
		if !selectorConflicts(p.s, pod.Spec.NodeSelector) {
			p.moves = append(p.moves, move{pod: keep(pod), reason: MoveUnplaced, why: "it was admitted without a seat (the webhook was unreachable)"})
		}
		return
	}
	if pod.Annotations[strategy.AnnotationFallbackFrom] != "" {
		p.res.fallbackPods++
	}
	if seat > p.rev.replicas {
		p.above[seat] = keep(pod)
		return
	}
	p.heldSeats = append(p.heldSeats, seat)
	if m, ok := p.moveOff(pod, seat); ok {
		p.moves = append(p.moves, m)
	}
}

// moveOff returns the move of a pod holding seat (up to the replica count) whose term
// is not its seat's, unless it had better stay for now.
func (p *revPass) moveOff(pod *corev1.Pod, seat int) (move, bool) {
	s := p.s
	want, have := p.placement.Terms[seat-1], strategy.TermOf(s, pod)
	if have == want {
		return move{}, false
	}
	haveGone := p.unavailable(have)
	if haveGone && pod.Spec.NodeName != "" {
		// The term's capacity is short, not gone: this pod has its node, so it stays.
		// Only the pods that cannot get one move (their replacements fall back).
		return move{}, false
	}
	if haveGone && (p.waiting[want] != nil || p.stranded[want] != nil) {
		// The fallback term's own pods wait for capacity too: sending more there only
		// adds to the wait. Move once they run.
		p.heldForFallback++
		return move{}, false
	}
	m := move{pod: keep(pod), seat: seat, reason: MoveDrift}
	from, _ := strconv.Atoi(pod.Annotations[strategy.AnnotationFallbackFrom])
	switch {
	case haveGone:
		m.reason = MoveStranded
		m.why = fmt.Sprintf("term %d (%s) is unavailable; its seat %d goes to term %d (%s)", have+1, termLabels(s, have), seat, want+1, termLabels(s, want))
	case from == want+1:
		p.l.termBack(p.w, p.rev.uid, s, want, p.rec)
		m.reason = MoveReturn
		m.why = fmt.Sprintf("seat %d's own term %d (%s) is available again; moving it back from term %d", seat, want+1, termLabels(s, want), have+1)
	default:
		m.why = fmt.Sprintf("seat %d is on term %d (%s), the strategy places it on term %d (%s)", seat, have+1, termLabels(s, have), want+1, termLabels(s, want))
	}
	return m, true
}

// moveSeatsAbove moves the pods of the highest seats above the replica count, one per
// seat free below it, once the revision has all its pods.
func (p *revPass) moveSeatsAbove() {
	n := p.rev.replicas
	if p.live < n {
		return
	}
	held := make([]bool, n+1) // n is at most live: no bigger than the pods that exist
	for _, seat := range p.heldSeats {
		held[seat] = true
	}
	var free []int
	for seat := 1; seat <= n; seat++ {
		if !held[seat] {
			free = append(free, seat)
		}
	}
	seats := make([]int, 0, len(p.above))
	for seat := range p.above {
		seats = append(seats, seat)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(seats)))
	for i := 0; i < len(seats) && i < len(free); i++ {
		p.moves = append(p.moves, move{pod: p.above[seats[i]], seat: seats[i], reason: MoveSeatAbove,
			why: fmt.Sprintf("seat %d is above the replica count %d while seat %d is free", seats[i], n, free[i])})
	}
}

// act moves what planMoves found, unless the pass struck a term (every replica must
// see the record before the replacements are admitted), the workload opted out, or
// there is nowhere better to go; it reports what is left.
func (p *revPass) act(ctx context.Context) result {
	p.res.off = len(p.moves) > 0 || len(p.stranded) > 0
	switch {
	case p.struck:
		// Give every replica's informer a pass to see the new record before the evicted
		// pods' replacements are admitted, or they would strand again.
		p.res.pending = len(p.moves)
		return p.res
	case len(p.moves) == 0:
		delete(p.l.blockedSaid, p.rev.uid)
		return p.res
	case p.optOut:
		p.res.pending = len(p.moves)
		p.l.blocked(p.w, p.rev.uid, fmt.Sprintf("%d pods off their placement; not moved: %s is %q", len(p.moves), strategy.AnnotationConverge, "false"))
		return p.res
	}
	moves := p.moves
	if p.placement.Stuck {
		// Nowhere better to go: moving would only recreate them where they are.
		kept := moves[:0]
		for _, m := range moves {
			if m.reason != MoveStranded {
				kept = append(kept, m)
			}
		}
		moves = kept
	}
	p.res.pending = p.l.evictWithinBudget(ctx, p.w, p.rev, p.ready, moves, p.log)
	return p.res
}

// evictWithinBudget evicts moves, pods without a node first (they run nowhere, so
// evicting them costs no availability), then the highest seats first. A pod with a node
// is evicted only while the revision's unavailable pods (not Ready, or already evicted)
// stay within the budget after it, Ready or not: a pod that is Running but not Ready may
// be about to serve, and during a rollout the budget is 0. It returns how many moves are
// left for a later pass.
func (l *Loop) evictWithinBudget(ctx context.Context, w *clusterview.Workload, rev revision, ready int, moves []move, log logrus.FieldLogger) int {
	budget, err := Budget(l.cfg.MaxUnavailable, rev.replicas)
	if err != nil {
		return len(moves)
	}
	if rev.rolling {
		budget = 0
	}
	unavailable := max(0, rev.replicas-ready)
	sort.SliceStable(moves, func(i, j int) bool {
		ui, uj := moves[i].pod.Spec.NodeName == "", moves[j].pod.Spec.NodeName == ""
		if ui != uj {
			return ui
		}
		return moves[i].seat > moves[j].seat
	})
	left := 0
	var blockedBy string
	for _, m := range moves {
		if l.wasEvicted(m.pod) {
			continue
		}
		// Evicting a Ready pod makes one more unavailable; a pod with a node that is not
		// Ready is unavailable already, yet needs the same room: it may be about to serve.
		cost, room := 0, 0
		if m.pod.Spec.NodeName != "" {
			room = 1
			if isReady(m.pod) {
				cost = 1
			}
		}
		why := ""
		switch {
		case room > 0 && unavailable+room > budget:
			why = fmt.Sprintf("%d of %d pods unavailable, budget %d", unavailable, rev.replicas, budget)
			if rev.rolling {
				why = "a rollout is in progress"
			}
		case l.leading != nil && !l.leading():
			// No longer sure to be the only one moving pods: leave the rest to the leader.
			why = "this replica is no longer sure to lead the convergence loop"
			l.cfg.Metrics.evictions.WithLabelValues(m.reason, "fenced").Inc()
		default:
			var evicted bool
			evicted, why = l.move(ctx, w, rev, m, log.WithFields(logrus.Fields{"unavailable": unavailable + cost, "budget": budget}))
			if evicted {
				unavailable += cost
				continue
			}
		}
		if why != "" {
			left++
			if why != evictionFailed {
				blockedBy = why
			}
		}
	}
	if left > 0 && blockedBy != "" {
		l.blocked(w, rev.uid, fmt.Sprintf("%d pods wait to move: %s", left, blockedBy))
	} else {
		delete(l.blockedSaid, rev.uid)
	}
	return left
}

// evictionFailed is move's answer for an eviction that failed for a reason of its own
// (logged): the move is left for later, but blocks nothing.
const evictionFailed = "eviction failed"

// move evicts m's pod and says so. It returns whether the pod was evicted and, when it
// was not and the move is left for later, why ("" for a pod already gone).
func (l *Loop) move(ctx context.Context, w *clusterview.Workload, rev revision, m move, log logrus.FieldLogger) (bool, string) {
	err := l.evict(ctx, m.pod)
	switch {
	case err == nil:
		l.evicted[m.pod.UID] = time.Now()
		if m.reason == MoveReturn {
			if from, err := strconv.Atoi(m.pod.Annotations[strategy.AnnotationFallbackFrom]); err == nil {
				l.returning[uidTerm(rev.uid, from-1)] = time.Now()
			}
		}
		l.cfg.Metrics.evictions.WithLabelValues(m.reason, "evicted").Inc()
		msg := fmt.Sprintf("evicted pod %s (%s): %s", m.pod.Name, m.reason, m.why)
		l.event(w, corev1.EventTypeNormal, ReasonConverge, msg)
		log.WithFields(logrus.Fields{"pod": m.pod.Name, "reason": m.reason}).Info(msg)
		return true, ""
	case apierrors.IsTooManyRequests(err):
		// A PodDisruptionBudget says not now.
		l.cfg.Metrics.evictions.WithLabelValues(m.reason, "refused").Inc()
		return false, "a PodDisruptionBudget refuses the eviction: " + err.Error()
	case apierrors.IsNotFound(err):
		return false, ""
	default:
		log.WithError(err).WithField("pod", m.pod.Name).Warn("eviction failed")
		return false, evictionFailed
	}
}

// Budget is how many of replicas pods may be unavailable at once: max, an int or a
// percentage rounded down, and never below 1 (so that a small workload can move at all).
func Budget(max intstr.IntOrString, replicas int) (int, error) {
	if max.Type == intstr.String && max.StrVal == "" {
		max = intstr.FromString("10%")
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&max, replicas, false)
	if err != nil {
		return 0, fmt.Errorf("CONVERGE_MAX_UNAVAILABLE %q: want a pod count or a percentage: %w", max.String(), err)
	}
	if n < 0 {
		return 0, fmt.Errorf("CONVERGE_MAX_UNAVAILABLE %q: must not be negative", max.String())
	}
	return max1(n), nil
}

func max1(n int) int {
	if n < 1 {
		return 1
	}
	return n
}

func (l *Loop) wasEvicted(p *corev1.Pod) bool {
	_, ok := l.evicted[p.UID]
	return ok
}

func (l *Loop) evict(ctx context.Context, p *corev1.Pod) error {
	uid := p.UID
	err := l.cfg.Client.CoreV1().Pods(p.Namespace).EvictV1(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	})
	if err != nil && !apierrors.IsTooManyRequests(err) && !apierrors.IsNotFound(err) {
		return fmt.Errorf("evict pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return err
}

// unplaced lists the revision's live pods that carry no seat.
func (l *Loop) unplaced(ctx context.Context, rev revision) ([]*corev1.Pod, error) {
	var sel *metav1.LabelSelector
	switch rev.kind {
	case "ReplicaSet":
		rs, err := l.cfg.Client.AppsV1().ReplicaSets(rev.namespace).Get(ctx, rev.name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get ReplicaSet %s/%s: %w", rev.namespace, rev.name, err)
		}
		sel = rs.Spec.Selector
	default:
		s, err := l.cfg.Client.AppsV1().StatefulSets(rev.namespace).Get(ctx, rev.name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get StatefulSet %s/%s: %w", rev.namespace, rev.name, err)
		}
		sel = s.Spec.Selector
	}
	selector, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, fmt.Errorf("selector of %s %s/%s: %w", rev.kind, rev.namespace, rev.name, err)
	}
	// Only pods without the managed label: the cache has the others. A revision is
	// short of placed pods through every big scale-up, and listing all its pods then
	// moved thousands of them every 10 s to find none.
	unmanaged, err := labels.NewRequirement(strategy.LabelManaged, selection.DoesNotExist, nil)
	if err != nil {
		return nil, fmt.Errorf("selector of unplaced pods: %w", err)
	}
	selector = selector.Add(*unmanaged)
	list, err := l.cfg.Client.CoreV1().Pods(rev.namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return nil, fmt.Errorf("list pods of %s %s/%s: %w", rev.kind, rev.namespace, rev.name, err)
	}
	var out []*corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		if !metav1.IsControlledBy(p, &metav1.ObjectMeta{UID: rev.uid}) || !strategy.HoldsSeat(p) {
			continue
		}
		if _, seated := strategy.SeatOf(p); !seated {
			out = append(out, p)
		}
	}
	return out, nil
}

// selectorConflicts reports whether sel sets a key of some term to another value.
func selectorConflicts(s *strategy.Strategy, sel map[string]string) bool {
	for _, t := range s.Terms {
		for _, l := range t.Labels {
			if v, ok := sel[l.Key]; ok && v != l.Value {
				return true
			}
		}
	}
	return false
}
