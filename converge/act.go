package converge

// Act: the one place a pass changes anything: it writes the plan's unavailability
// records, says its notes, evicts within the budget and the PodDisruptionBudgets, and
// updates what the loop remembers.

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/unavailability"
)

// act carries out p, planned from snap, and returns the pass's result.
func (l *Loop) act(ctx context.Context, snap *snapshot, p *passPlan) result {
	res, uid := p.res, snap.rev.uid
	log := l.cfg.Log.WithFields(logrus.Fields{"workload": snap.w.Describe(), "revision": snap.rev.name})
	// A pod of it Ready again ends one of its evictions in flight; whether it still
	// waits for the pace, this pass says.
	l.mem.stillUnavailable(uid, p.unavailable)
	l.mem.waitsForPace(uid, paceKey{}, false)
	l.record(ctx, snap, p, &res, log)
	l.sayAndHold(snap, p, log)
	if len(p.strikes) > 0 {
		// Every replica's informer gets a pass to see the new record before the evicted
		// pods' replacements are admitted, or they would strand again.
		res.pending = len(p.moves)
		return res
	}
	blocked := l.moveWithin(ctx, snap, p, &res, log)
	if blocked == "" {
		l.mem.unblocked(uid)
	} else if key := blockedKey(blocked); l.mem.sayBlocked(uid, key) {
		l.event(snap.w, corev1.EventTypeNormal, ReasonConvergeBlocked, blocked)
		log.Info(blocked)
	}
	return res
}

// record writes p's strikes and extended marks at risk, and counts the revision's
// unavailable terms, with the soonest end of their marks, into res.
func (l *Loop) record(ctx context.Context, snap *snapshot, p *passPlan, res *result, log logrus.FieldLogger) {
	active := maps.Clone(snap.active)
	if active == nil {
		active = map[int]unavailability.TermState{}
	}
	for _, st := range p.strikes {
		state, err := l.strike(ctx, snap, p, st, log)
		if err != nil {
			log.WithError(err).Warn("cannot record an unavailable term")
			res.failed = true
			continue
		}
		active[st.term] = state
	}
	for _, st := range p.extends {
		state, err := l.markAtRisk(ctx, snap, st)
		if err != nil {
			log.WithError(err).Warn("cannot extend a term's mark at risk")
			res.failed = true
			continue
		}
		active[st.term] = state
		log.WithFields(logrus.Fields{"term": st.term + 1, "until": state.Until}).Debug("term still at risk: " + st.reason)
	}
	res.unavailable = map[termSource]int{}
	for t, st := range active {
		res.unavailable[termSource{snap.s.Terms[t].LabelString(), snap.origin}]++
		if res.until.IsZero() || st.Until.Before(res.until) {
			res.until = st.Until
		}
	}
}

// sayAndHold says p's notes and that the revision is stuck, and holds the moves the
// repeat guard caught (their Events and the soonest end in p.heldUntil).
func (l *Loop) sayAndHold(snap *snapshot, p *passPlan, log logrus.FieldLogger) {
	for _, n := range p.notes {
		l.say(snap.w, n, log)
	}
	if l.mem.sayStuck(snap.rev.uid, p.stuck != "") {
		l.event(snap.w, corev1.EventTypeWarning, ReasonNoFallback, p.stuck)
		log.Warn(p.stuck)
	}
	for _, reason := range p.holds {
		until := l.mem.hold(revisionReason{snap.rev.uid, reason}, snap.now)
		if p.heldUntil.IsZero() || until.Before(p.heldUntil) {
			p.heldUntil = until // the pass after it is due then
		}
		l.cfg.Metrics.holds.WithLabelValues(reason).Inc()
		msg := fmt.Sprintf("moves for %s held until %s: the pods moved for it came back in the same state, so moving more would only churn (is the namespace enabled for the webhook, does the API server reach it?)",
			reason, until.UTC().Format(time.RFC3339))
		l.event(snap.w, corev1.EventTypeWarning, ReasonConvergeHeld, msg)
		log.WithFields(logrus.Fields{"reason": reason, "until": until}).Warn(msg)
	}
}

// moveWithin evicts p's moves within the budget and the pace, unless the revision's moves
// are held (snap.hold), and returns why moves wait ("": none do).
func (l *Loop) moveWithin(ctx context.Context, snap *snapshot, p *passPlan, res *result, log logrus.FieldLogger) string {
	blocked := p.blocked
	if blocked == "" && p.held > 0 {
		blocked = fmt.Sprintf("%d pods held: the pods moved before came back in the same state", p.held)
	}
	switch {
	case len(p.moves) == 0:
	case snap.hold != "":
		res.pending = len(p.moves)
	default:
		var why string
		var paced int
		res.pending, paced, why = l.evictWithinBudget(ctx, snap, p, log)
		res.waiting[waitPace] = paced
		l.mem.waitsForPace(snap.rev.uid, paceKeyOf(snap), paced > 0)
		if why != "" {
			blocked = fmt.Sprintf("%d pods wait to move: %s", res.pending, why)
		}
	}
	return blocked
}

// blockedKey is what makes a "moves wait" message new: its reason, not its count.
func blockedKey(msg string) string {
	if i := strings.Index(msg, ":"); i > 0 {
		return msg[i:]
	}
	return msg
}

// strike records st's term unavailable (with Karpenter's nominations among its pending
// pods, when it says) and says where its seats go now.
func (l *Loop) strike(ctx context.Context, snap *snapshot, p *passPlan, st strike, log logrus.FieldLogger) (unavailability.TermState, error) {
	if st.risk != nil {
		return l.markedAtRisk(ctx, snap, p, st, log)
	}
	reason := st.reason
	if l.cfg.Signals != nil {
		if nominated, err := l.cfg.Signals.Nominated(ctx, snap.rev.namespace, st.pending); err == nil {
			reason += fmt.Sprintf("; Karpenter nominated %d of the %d pending pods", len(nominated), len(st.pending))
		}
	}
	state, err := l.cfg.Records.Strike(ctx, snap.rev.uid, snap.w.Describe(), st.term, reason, l.cfg.Cooldown)
	if err != nil {
		return state, err
	}
	labels := snap.s.Terms[st.term].LabelString()
	l.cfg.Metrics.marks.WithLabelValues(labels).Inc()
	msg := fmt.Sprintf("term %d (%s) unavailable for %s: %s; %s", st.term+1, labels,
		state.Until.Sub(snap.now).Round(time.Second), reason, fallbackSummary(p.placement))
	l.event(snap.w, corev1.EventTypeWarning, ReasonTermUnavailable, msg)
	log.WithFields(logrus.Fields{"term": st.term + 1, "until": state.Until, "strikes": state.Strikes}).Warn(msg)
	return state, nil
}

// markedAtRisk records st's term at risk and says so, and where its seats go now.
func (l *Loop) markedAtRisk(ctx context.Context, snap *snapshot, p *passPlan, st strike, log logrus.FieldLogger) (unavailability.TermState, error) {
	state, err := l.markAtRisk(ctx, snap, st)
	if err != nil {
		return state, err
	}
	labels := snap.s.Terms[st.term].LabelString()
	l.cfg.Metrics.riskMarks.WithLabelValues(labels).Inc()
	msg := fmt.Sprintf("term %d (%s) at risk until %s (a cool-down after its last signal): %s; %s; the pods on its signalled nodes move within the budget",
		st.term+1, labels, state.Until.UTC().Format(time.RFC3339), st.risk.Evidence(), fallbackSummary(p.placement))
	l.event(snap.w, corev1.EventTypeWarning, ReasonTermAtRisk, msg)
	log.WithFields(logrus.Fields{"term": st.term + 1, "until": state.Until, "strikes": state.Strikes}).Warn(msg)
	return state, nil
}

// markAtRisk writes st's mark at risk, with the verdict's evidence, into the record.
func (l *Loop) markAtRisk(ctx context.Context, snap *snapshot, st strike) (unavailability.TermState, error) {
	v := st.risk
	risk := unavailability.Risk{SignalledNodes: len(v.Signalled), Nodes: v.Nodes, Window: v.Window().String(),
		LastSignal: v.Last, Instances: v.Instances(20), ByKind: map[string]int{}}
	for k, n := range v.ByKind {
		risk.ByKind[string(k)] = n
	}
	return l.cfg.Records.MarkAtRisk(ctx, snap.rev.uid, snap.w.Describe(), st.term, st.reason, risk, st.until, l.cfg.Cooldown)
}

// say says n unless its key was said.
func (l *Loop) say(w *clusterview.Workload, n note, log logrus.FieldLogger) {
	if !l.mem.sayOnce(n.key) {
		return
	}
	if n.metric != "" {
		l.cfg.Metrics.launchWaits.WithLabelValues(n.metric).Inc()
	}
	if n.reason != "" {
		l.event(w, corev1.EventTypeNormal, n.reason, n.msg)
	}
	log.WithFields(n.fields).Info(n.msg)
}

// evictWithinBudget evicts p's moves in order: a pod with a node only while the
// revision's unavailable pods (not Ready, or already evicted) stay within the budget
// after it, and the pace leaves room for it. It returns how many moves are left for a
// later pass, how many of them wait for the pace, and, when some wait, why ("" when
// only failed evictions are left: they block nothing).
func (l *Loop) evictWithinBudget(ctx context.Context, snap *snapshot, p *passPlan, log logrus.FieldLogger) (left, paced int, blockedBy string) {
	unavailable := p.unavailable
	for _, m := range p.evict {
		why := ""
		switch {
		case m.room > 0 && unavailable+m.room > p.budget:
			why = fmt.Sprintf("%d of %d pods unavailable, budget %d", unavailable, snap.rev.replicas, p.budget)
			if snap.rev.rolling {
				why = "a rollout is in progress"
			}
		case l.stopped(snap.rev.namespace) != "":
			// Stopped within this pass: honoured before the next eviction.
			why = l.stopped(snap.rev.namespace)
		case m.room > 0 && l.pace(snap) != "":
			why = l.pace(snap)
			paced++
		case l.leading != nil && !l.leading():
			// No longer sure to be the only one moving pods: leave the rest to the leader.
			why = "this replica is no longer sure to lead the convergence loop"
			l.cfg.Metrics.evictions.WithLabelValues(m.reason, "fenced").Inc()
		case !l.evictions.Allow():
			why = fmt.Sprintf("the cluster-wide cap of %d evictions a minute is reached (MAX_EVICTIONS_PER_MINUTE)", l.cfg.MaxEvictionsPerMinute)
			l.cfg.Metrics.evictions.WithLabelValues(m.reason, "capped").Inc()
		default:
			var evicted bool
			evicted, why = l.move(ctx, snap, m, p.moves, log.WithFields(logrus.Fields{"unavailable": unavailable + m.cost, "budget": p.budget}))
			if evicted {
				unavailable += m.cost
				if m.room > 0 {
					l.mem.noteInFlight(snap.rev.uid, snap.rev.namespace)
				}
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
	return left, paced, blockedBy
}

// pace says why a move of a pod with a node of snap's revision waits for the
// cluster-wide pace, "" when it may go: the pods the loop evicted that are not Ready
// again fill the room across the cluster (MaxUnavailableCluster) or in the namespace
// (MaxUnavailablePerNamespace), or a revision before it in the pace's order (namespace,
// then workload name) waits for the room and could take it.
func (l *Loop) pace(snap *snapshot) string {
	ns := snap.rev.namespace
	cluster, inNamespace := l.mem.inFlight(ns)
	switch {
	case cluster >= l.cfg.MaxUnavailableCluster:
		return fmt.Sprintf("the cluster-wide pace is reached: at most %d pods the loop evicted may be unavailable at once (CONVERGE_MAX_UNAVAILABLE_CLUSTER)", l.cfg.MaxUnavailableCluster)
	case inNamespace >= l.cfg.MaxUnavailablePerNamespace:
		return fmt.Sprintf("the namespace's pace is reached: at most %d pods the loop evicted in it may be unavailable at once (CONVERGE_MAX_UNAVAILABLE_PER_NAMESPACE)", l.cfg.MaxUnavailablePerNamespace)
	}
	room := func(namespace string) bool {
		_, n := l.mem.inFlight(namespace)
		return n < l.cfg.MaxUnavailablePerNamespace
	}
	if l.mem.pacedBefore(snap.rev.uid, paceKeyOf(snap), room) {
		return "workloads before it in the pace's order (namespace, then name) wait for the room the cluster-wide pace leaves"
	}
	return ""
}

// paceKeyOf is snap's revision's place in the pace's order.
func paceKeyOf(snap *snapshot) paceKey {
	return paceKey{snap.rev.namespace, snap.w.Ref.Name + " " + snap.w.Ref.Kind}
}

// stopped says why moves in namespace ns are stopped (Config.Stopped), "" when they are not.
func (l *Loop) stopped(ns string) string {
	if l.cfg.Stopped == nil {
		return ""
	}
	return l.cfg.Stopped(ns)
}

// evictionFailed is move's answer for an eviction that failed for a reason of its own
// (logged): the move is left for later, but blocks nothing.
const evictionFailed = "eviction failed"

// move evicts m's pod and says so (planned: every move of the pass, for the repeat
// guard). It returns whether the pod was evicted and, when it was not and the move is
// left for later, why ("" for a pod already gone).
func (l *Loop) move(ctx context.Context, snap *snapshot, m move, planned []move, log logrus.FieldLogger) (bool, string) {
	err := l.evict(ctx, m.pod)
	switch {
	case err == nil:
		var back *revisionTerm
		if m.reason == MoveReturn && m.pod.FallbackFrom > 0 {
			back = &revisionTerm{snap.rev.uid, m.pod.FallbackFrom - 1}
		}
		l.mem.noteEviction(m.pod.UID, back, time.Now())
		l.mem.noteMoved(revisionReason{snap.rev.uid, m.reason}, planned)
		if !m.opening.IsZero() {
			l.mem.noteWindowMove(revisionOpening{snap.rev.uid, m.opening})
		}
		l.cfg.Metrics.evictions.WithLabelValues(m.reason, "evicted").Inc()
		msg := fmt.Sprintf("evicted pod %s (%s): %s", m.pod.Name, m.reason, m.why)
		l.event(snap.w, corev1.EventTypeNormal, ReasonConverge, msg)
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

// evict evicts p through the Eviction API, only the pod with p's UID.
func (l *Loop) evict(ctx context.Context, p clusterview.PlacedPod) error {
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

// event records an Event on the workload users see.
func (l *Loop) event(w *clusterview.Workload, typ, reason, msg string) {
	if l.cfg.Recorder == nil {
		return
	}
	ref := w.Ref
	l.cfg.Recorder.Event(&ref, typ, reason, msg)
}
