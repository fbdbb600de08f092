package converge

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// Event reasons the loop records on workloads.
const (
	ReasonTermUnavailable = "TermUnavailable"
	ReasonNoFallback      = "NoFallbackTerm"
	ReasonConverge        = "Converge"
	ReasonConvergeBlocked = "ConvergeBlocked"
	ReasonTermBack        = "TermAvailable"
)

// Reasons for a move, the values of the evictions metric's "reason" label.
const (
	MoveStranded    = "stranded"
	MoveReturn      = "return"
	MoveDrift       = "drift"
	MoveUnplaced    = "unplaced"
	MoveSeatAbove   = "seat-above-replicas"
	defaultInterval = 2 * time.Second
	// defaultPassDeadline bounds a pass: long enough for thousands of cached revisions,
	// short enough that a slow API server cannot hold the loop for long.
	defaultPassDeadline = 10 * time.Second
)

// Signals is Karpenter's early word on a term (optional): why the NodePools serving
// labels cannot launch capacity for pending pods now, "" when it said nothing.
type Signals interface {
	Unlaunchable(ctx context.Context, labels map[string]string, pending []*corev1.Pod) string
	// Nominated counts the pods (UIDs, of one namespace) Karpenter nominated for capacity.
	Nominated(ctx context.Context, namespace string, pods map[types.UID]bool) (int, error)
}

// Launches says what Karpenter is launching for the capacity a term's labels select
// (karpenter.NodeClaims).
type Launches interface {
	Flight(labels map[string]string, now time.Time) karpenter.Flight
}

// Config is what the loop needs.
type Config struct {
	Client     kubernetes.Interface
	Caches     *clusterview.Caches
	Records    *Records
	Recorder   record.EventRecorder
	Metrics    *Metrics
	Namespaces clusterview.NamespaceFilter
	// FallbackAfter is how long placed pods may stay Pending and unschedulable before
	// their term is marked unavailable.
	FallbackAfter time.Duration
	// Cooldown is how long a term stays unavailable after its first strike.
	Cooldown time.Duration
	// MaxUnavailable is the per-workload budget of pods not Running and Ready: an int
	// or a percentage of the replicas (rounded down), at least 1.
	MaxUnavailable intstr.IntOrString
	// Interval between passes (default 2s: a pass reads only caches).
	Interval time.Duration
	// PassDeadline bounds one pass (default 10s): the revisions it did not reach come
	// first in the next one.
	PassDeadline time.Duration
	Signals      Signals // optional
	// Launches (optional): a term whose pods have waited FALLBACK_AFTER without a word
	// from Karpenter is not marked unavailable while NodeClaims for it are launching or
	// made progress within FALLBACK_AFTER; time alone counts only from then on.
	Launches Launches
	Log      logrus.FieldLogger
}

// Loop is the convergence loop; run it on the elected replica only.
type Loop struct {
	cfg Config
	// running is held by Run: after a lost and regained leadership the new Run waits
	// for the old one's last pass.
	running sync.Mutex
	// What the loop remembers between passes of one term of leadership; a new leader
	// starts afresh from the API server.
	evicted     map[types.UID]time.Time // pods evicted, until the cache shows them gone
	offSince    map[types.UID]time.Time // revision not at its placement since
	suspect     map[types.UID]int       // passes a revision had fewer placed pods than replicas
	listed      map[types.UID]time.Time // last live listing of a revision's pods
	said        map[string]bool         // "term back" said, per revision, term and cool-down end
	stuckSaid   map[types.UID]bool
	blockedSaid map[types.UID]string
	returning   map[string]time.Time // revision/term: last canary evicted to return there
	resume      types.UID            // the first revision the last pass did not reach
	// leading is the leadership fence of the current Run, checked right before each
	// eviction; nil (a loop run without election, as in tests) always leads.
	leading func() bool
}

// NewLoop validates cfg and returns a loop.
func NewLoop(cfg Config) (*Loop, error) {
	if cfg.Client == nil || cfg.Caches == nil || cfg.Records == nil || cfg.Metrics == nil || cfg.Log == nil {
		return nil, fmt.Errorf("converge: client, caches, records, metrics and log are required")
	}
	if cfg.FallbackAfter <= 0 || cfg.Cooldown <= 0 {
		return nil, fmt.Errorf("converge: FALLBACK_AFTER and FALLBACK_COOLDOWN must be positive")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = defaultInterval
	}
	if cfg.PassDeadline <= 0 {
		cfg.PassDeadline = defaultPassDeadline
	}
	if _, err := Budget(cfg.MaxUnavailable, 10); err != nil {
		return nil, err
	}
	l := &Loop{cfg: cfg}
	l.reset()
	return l, nil
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

// Run makes a pass every interval until ctx ends. leading (nil: always) is checked
// right before each eviction; see RunElected.
func (l *Loop) Run(ctx context.Context, leading func() bool) {
	l.running.Lock()
	defer l.running.Unlock()
	l.reset()
	l.leading = leading
	l.cfg.Metrics.leader.Set(1)
	defer func() {
		// Another replica runs the loop now and reports: no stale value of this one's
		// stays beside its own (the alerts take the maximum over the replicas).
		l.cfg.Metrics.leader.Set(0)
		l.cfg.Metrics.lag.Set(0)
		l.cfg.Metrics.pending.Set(0)
		l.cfg.Metrics.fallback.Set(0)
		l.cfg.Metrics.unavailable.Reset()
		l.cfg.Metrics.termTarget.Reset()
		l.cfg.Metrics.termPods.Reset()
	}()
	l.cfg.Log.Info("convergence loop started")
	t := time.NewTicker(l.cfg.Interval)
	defer t.Stop()
	for {
		// A pass is bounded: what it does not reach, the next one starts with.
		pass, cancel := context.WithTimeout(ctx, l.cfg.PassDeadline)
		l.Pass(pass)
		cancel()
		select {
		case <-ctx.Done():
			l.cfg.Log.Info("convergence loop stopped")
			return
		case <-t.C:
		}
	}
}

// reset forgets what an earlier term of leadership remembered.
func (l *Loop) reset() {
	l.evicted, l.offSince, l.suspect = map[types.UID]time.Time{}, map[types.UID]time.Time{}, map[types.UID]int{}
	l.stuckSaid, l.blockedSaid = map[types.UID]bool{}, map[types.UID]string{}
	l.listed, l.said = map[types.UID]time.Time{}, map[string]bool{}
	l.returning = map[string]time.Time{}
}

// revision is one counting unit the loop looks at.
type revision struct {
	uid                 types.UID
	namespace, name     string
	kind                string // ReplicaSet or StatefulSet
	replicas            int
	templateAnnotations map[string]string
	// rolling is set while older ReplicaSets of the Deployment still have replicas, or
	// the StatefulSet controller rolls to a new revision: the rollout is moving pods
	// itself, so the loop's budget is 0.
	rolling bool
}

// Pass looks at every current revision once.
func (l *Loop) Pass(ctx context.Context) {
	now := time.Now()
	seen := map[types.UID]bool{}
	lag, fallbackPods, pendingRepairs := time.Duration(0), 0, 0
	target, placed := map[string]int{}, map[string]int{}
	l.cfg.Metrics.unavailable.Reset()
	revs, exists := l.revisions()
	// Start where the last pass ran out of time, so no revision waits for ever behind
	// the others.
	sort.Slice(revs, func(i, j int) bool { return revs[i].uid < revs[j].uid })
	if l.resume != "" {
		at := sort.Search(len(revs), func(i int) bool { return revs[i].uid >= l.resume })
		revs = append(revs[at:], revs[:at]...)
	}
	l.resume = ""
	for i, rev := range revs {
		seen[rev.uid] = true
		if ctx.Err() != nil {
			// Out of time: the rest keep what they had, and go first next time.
			if l.resume == "" {
				l.resume = rev.uid
				l.cfg.Metrics.passesCut.Inc()
				l.cfg.Log.WithField("left", len(revs)-i).Warn("convergence pass ran out of time; the rest go first in the next one")
			}
			if _, ok := l.offSince[rev.uid]; ok {
				lag = max(lag, now.Sub(l.offSince[rev.uid]))
			}
			continue
		}
		res := l.converge(ctx, rev, now)
		for term, n := range res.target {
			target[term] += n
		}
		for term, n := range res.placed {
			placed[term] += n
		}
		fallbackPods += res.fallbackPods
		pendingRepairs += res.pending
		if res.off {
			if _, ok := l.offSince[rev.uid]; !ok {
				l.offSince[rev.uid] = now
			}
			lag = max(lag, now.Sub(l.offSince[rev.uid]))
		} else {
			delete(l.offSince, rev.uid)
		}
	}
	l.cfg.Metrics.fallback.Set(float64(fallbackPods))
	l.cfg.Metrics.pending.Set(float64(pendingRepairs))
	l.cfg.Metrics.lag.Set(lag.Seconds())
	// Set at once after the pass, so a scrape never sees a pass's partial sums. A pass
	// cut short leaves out the revisions it did not reach.
	l.cfg.Metrics.termTarget.Reset()
	l.cfg.Metrics.termPods.Reset()
	for term, n := range target {
		l.cfg.Metrics.termTarget.WithLabelValues(term).Set(float64(n))
		l.cfg.Metrics.termPods.WithLabelValues(term).Set(float64(placed[term]))
	}
	for term, n := range placed {
		if _, ok := target[term]; !ok {
			l.cfg.Metrics.termPods.WithLabelValues(term).Set(float64(n))
		}
	}
	for uid := range l.offSince {
		if !seen[uid] {
			delete(l.offSince, uid)
		}
	}
	for key := range l.said {
		if uid, _, _ := strings.Cut(key, "/"); !seen[types.UID(uid)] {
			delete(l.said, key)
		}
	}
	for uid, at := range l.evicted {
		if now.Sub(at) > time.Minute {
			delete(l.evicted, uid)
		}
	}
	for key := range l.returning {
		if uid, _, _ := strings.Cut(key, "/"); !seen[types.UID(uid)] {
			delete(l.returning, key)
		}
	}
	if ctx.Err() != nil {
		return // stale records wait for a pass with time left
	}
	for _, rec := range l.cfg.Records.All() {
		// A revision scaled to zero keeps its record (and so its cool-down history) until
		// the record goes stale; only a deleted revision's record goes at once.
		if err := l.cfg.Records.Forget(ctx, rec, l.cfg.Cooldown, !seen[rec.Revision] && !exists[rec.Revision]); err != nil {
			l.cfg.Log.WithError(err).Warn("cannot drop a stale unavailability record")
		}
	}
}

// revisions lists the current revisions with replicas: a Deployment's newest
// ReplicaSet (older ones are being scaled away by the rollout), bare ReplicaSets and
// StatefulSets.
//
// known holds every ReplicaSet and StatefulSet in the caches, with replicas or not: a
// revision scaled to zero keeps its unavailability record while it exists.
func (l *Loop) revisions() (out []revision, known map[types.UID]bool) {
	r := l.cfg.Caches.Resolver
	known = map[types.UID]bool{}
	sets, err := r.ReplicaSets.List(labels.Everything())
	if err != nil {
		l.cfg.Log.WithError(err).Warn("cannot list ReplicaSets from the cache")
	}
	active := map[types.UID]int{} // ReplicaSets with replicas, per Deployment
	for _, rs := range sets {
		if owner := metav1.GetControllerOf(rs); owner != nil && owner.Kind == "Deployment" && rs.Spec.Replicas != nil && *rs.Spec.Replicas > 0 {
			active[owner.UID]++
		}
	}
	for _, rs := range sets {
		known[rs.UID] = true
		if rs.Spec.Replicas == nil || *rs.Spec.Replicas == 0 || l.cfg.Namespaces.Skip(rs.Namespace) {
			continue
		}
		rolling := false
		if owner := metav1.GetControllerOf(rs); owner != nil && owner.Kind == "Deployment" {
			d, err := r.Deployments.Deployments(rs.Namespace).Get(owner.Name)
			if err != nil || d.UID != owner.UID || d.Annotations[revisionAnnotation] != rs.Annotations[revisionAnnotation] {
				continue
			}
			rolling = active[owner.UID] > 1
		}
		out = append(out, revision{uid: rs.UID, namespace: rs.Namespace, name: rs.Name, kind: "ReplicaSet",
			replicas: int(*rs.Spec.Replicas), templateAnnotations: rs.Spec.Template.Annotations, rolling: rolling})
	}
	statefulSets, err := r.StatefulSets.List(labels.Everything())
	if err != nil {
		l.cfg.Log.WithError(err).Warn("cannot list StatefulSets from the cache")
	}
	for _, s := range statefulSets {
		known[s.UID] = true
		if s.Spec.Replicas == nil || *s.Spec.Replicas == 0 || l.cfg.Namespaces.Skip(s.Namespace) {
			continue
		}
		out = append(out, revision{uid: s.UID, namespace: s.Namespace, name: s.Name, kind: "StatefulSet",
			replicas: int(*s.Spec.Replicas), templateAnnotations: s.Spec.Template.Annotations, rolling: statefulSetRolling(s)})
	}
	return out, known
}

const revisionAnnotation = "deployment.kubernetes.io/revision"

// statefulSetRolling reports whether the StatefulSet controller is rolling pods to a new
// revision (RollingUpdate, the default): it replaces pods itself, so the loop's budget is
// 0. With OnDelete the user replaces pods when they choose, which is no rollout to wait for.
func statefulSetRolling(s *appsv1.StatefulSet) bool {
	if s.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		return false
	}
	return s.Status.ObservedGeneration < s.Generation ||
		(s.Status.UpdateRevision != "" && s.Status.UpdateRevision != s.Status.CurrentRevision)
}

// result is what one revision's pass reports for the metrics.
type result struct {
	fallbackPods, pending int
	off                   bool
	// target and placed count, by term label string, the pods the revision should
	// have on each term and the live placed pods it has there.
	target, placed map[string]int
}

// move is one pod the loop wants elsewhere.
type move struct {
	pod    *corev1.Pod
	seat   int
	reason string
	why    string
}

func (l *Loop) converge(ctx context.Context, rev revision, now time.Time) result {
	var res result
	w, err := l.cfg.Caches.Resolver.Resolve(ctx, rev.namespace, &metav1.OwnerReference{APIVersion: "apps/v1", Kind: rev.kind, Name: rev.name, UID: rev.uid})
	if err != nil {
		return res
	}
	src := strategy.Find(append([]strategy.AnnotatedObject{{Name: "pod template", Annotations: rev.templateAnnotations}}, w.Chain...)...)
	if !src.Active() {
		return res
	}
	s, err := strategy.Parse(src.Raw)
	if err != nil {
		return res
	}
	log := l.cfg.Log.WithFields(logrus.Fields{"workload": w.Describe(), "revision": rev.name})
	optOut := false
	for _, o := range w.Chain {
		if v, ok := o.Annotations[strategy.AnnotationConverge]; ok && strings.EqualFold(strings.TrimSpace(v), "false") {
			optOut = true
		}
	}

	// The pods are read from the cache twice (detection, then moves), as views: a pass
	// keeps copies only of the pods it may name or move, not of all of a revision's.
	cached := clusterview.Revision{Namespace: rev.namespace, UID: rev.uid}
	n := rev.replicas

	// Detection: terms whose placed pods cannot get a node.
	rec := l.cfg.Records.Get(rev.uid)
	active := rec.Active(now)
	for t := range active {
		if t >= len(s.Terms) {
			delete(active, t) // a record older than a strategy with fewer terms
		}
	}
	struck := false
	placedLive := 0
	placedOn := make([]int, len(s.Terms))
	stranded := map[int]*pendingPods{}
	waiting := map[int]*pendingPods{}
	l.cfg.Caches.EachPodOf(cached, func(p *corev1.Pod) {
		if !strategy.HoldsSeat(p) {
			return
		}
		placedLive++
		t := strategy.TermOf(s, p)
		if t >= 0 {
			placedOn[t]++
		}
		since, ok := unschedulableSince(p)
		if t < 0 || !ok {
			return
		}
		group := waiting
		if now.Sub(since) >= l.cfg.FallbackAfter {
			group = stranded
		}
		group[t] = group[t].add(p, since)
	})
	terms := make([]int, 0, len(s.Terms))
	for t := range s.Terms {
		terms = append(terms, t)
	}
	for _, t := range terms {
		if _, on := active[t]; on {
			continue
		}
		var reason string
		switch {
		case stranded[t] != nil:
			g := stranded[t]
			reason = fmt.Sprintf("%d pods unschedulable for %s", g.count, g.age(now))
			word := ""
			if l.cfg.Signals != nil {
				word = l.cfg.Signals.Unlaunchable(ctx, s.Terms[t].LabelMap(), []*corev1.Pod{g.oldest})
			}
			switch {
			case word != "":
				reason += ", " + word
			case l.cfg.Launches != nil:
				// Time alone: only once Karpenter has stopped bringing capacity for the term.
				f := l.cfg.Launches.Flight(s.Terms[t].LabelMap(), now)
				if f.Progressing(now, l.cfg.FallbackAfter) {
					l.launching(w, rev.uid, s, t, g, f)
					continue
				}
				reason += ", and Karpenter is launching nothing for the term (" + f.String() + ")"
			}
		case waiting[t] != nil && l.cfg.Signals != nil:
			g := waiting[t]
			word := l.cfg.Signals.Unlaunchable(ctx, s.Terms[t].LabelMap(), []*corev1.Pod{g.oldest})
			if word == "" {
				continue
			}
			reason = fmt.Sprintf("%d pods unschedulable for %s, %s", g.count, g.age(now), word)
		default:
			continue
		}
		if l.cfg.Signals != nil {
			pending := pendingOn(l.cfg.Caches, cached, s, t)
			if n, err := l.cfg.Signals.Nominated(ctx, rev.namespace, pending); err == nil {
				reason += fmt.Sprintf("; Karpenter nominated %d of the %d pending pods", n, len(pending))
			}
		}
		st, err := l.cfg.Records.Strike(ctx, rev.uid, w.Describe(), t, reason, l.cfg.Cooldown)
		if err != nil {
			log.WithError(err).Warn("cannot record an unavailable term")
			continue
		}
		if active == nil {
			active = map[int]TermState{}
		}
		active[t] = st
		struck = true
		l.cfg.Metrics.marks.WithLabelValues(s.Terms[t].LabelString()).Inc()
		gone := func(x int) bool { _, ok := active[x]; return ok }
		msg := fmt.Sprintf("term %d (%s) unavailable for %s: %s; %s", t+1, s.Terms[t].LabelString(),
			st.Until.Sub(now).Round(time.Second), reason, fallbackSummary(s.Place(n, gone)))
		l.event(w, corev1.EventTypeWarning, ReasonTermUnavailable, msg)
		log.WithFields(logrus.Fields{"term": t + 1, "until": st.Until, "strikes": st.Strikes}).Warn(msg)
	}
	for t := range active {
		l.cfg.Metrics.unavailable.WithLabelValues(s.Terms[t].LabelString()).Inc()
	}
	gone := func(x int) bool { _, ok := active[x]; return ok }
	placement := s.Place(n, gone)
	res.target, res.placed = map[string]int{}, map[string]int{}
	for t, c := range placement.Counts(len(s.Terms)) {
		res.target[s.Terms[t].LabelString()] += c
		res.placed[s.Terms[t].LabelString()] += placedOn[t]
	}
	if placement.Stuck {
		if !l.stuckSaid[rev.uid] {
			l.stuckSaid[rev.uid] = true
			msg := "no term with a weight or a base is available: pods stay where they are until one is back (" + unavailableList(s, active) + ")"
			l.event(w, corev1.EventTypeWarning, ReasonNoFallback, msg)
			log.Warn(msg)
		}
	} else {
		delete(l.stuckSaid, rev.uid)
	}

	// Unplaced pods (admitted while the webhook was unreachable) carry no managed label,
	// so they are not cached: list the revision's pods only when the replica count says
	// some pods are not among the placed ones, twice in a row (a burst being admitted).
	// While the count stays short with nothing unplaced found (pods that cannot be
	// created, a quota), list at most every 10 s.
	if placedLive < n {
		l.suspect[rev.uid]++
	} else {
		delete(l.suspect, rev.uid)
		delete(l.listed, rev.uid)
	}
	var unplaced []*corev1.Pod
	if last, ok := l.listed[rev.uid]; l.suspect[rev.uid] >= 2 && (!ok || now.Sub(last) >= 10*time.Second) {
		var err error
		if unplaced, err = l.unplaced(ctx, rev); err != nil {
			log.WithError(err).Warn("cannot list the revision's pods")
		}
		if len(unplaced) == 0 {
			l.listed[rev.uid] = now
		}
	}

	// What should move; the seats held up to n, and the pods above n by seat.
	var moves []move
	var heldSeats []int
	above := map[int]*corev1.Pod{}
	live, ready := 0, 0
	// A return to a term after its cool-down starts with one canary: landed marks the
	// terms with a pod created since the cool-down ended that is Ready there, landing
	// those with one on its way (not Ready yet, or evicted to move there).
	landed, landing := map[int]bool{}, map[int]bool{}
	heldForFallback := 0
	consider := func(p *corev1.Pod) {
		if !strategy.HoldsSeat(p) {
			return
		}
		live++
		if isReady(p) && !l.wasEvicted(p) {
			ready++
		}
		if t := strategy.TermOf(s, p); t >= 0 {
			// Since when a pod counts as landed: the end of the term's cool-down, or,
			// when the record is gone, the last canary sent there. Creation times have
			// whole seconds, so a pod of the same second counts.
			var since time.Time
			if rec != nil {
				since = rec.Terms[t].Until
			}
			if since.IsZero() {
				since = l.returning[uidTerm(rev.uid, t)]
			}
			if !p.CreationTimestamp.Time.Before(since.Truncate(time.Second)) && since.Before(now) {
				if isReady(p) {
					landed[t] = true
				} else {
					landing[t] = true
				}
			}
		}
		seat, ok := strategy.SeatOf(p)
		if !ok {
			// A pod whose own nodeSelector contradicts a term was left unplaced on
			// purpose; its replacement would be too, so moving it would only churn.
			if !selectorConflicts(s, p.Spec.NodeSelector) {
				moves = append(moves, move{pod: keep(p), reason: MoveUnplaced, why: "it was admitted without a seat (the webhook was unreachable)"})
			}
			return
		}
		if p.Annotations[strategy.AnnotationFallbackFrom] != "" {
			res.fallbackPods++
		}
		if seat > n {
			above[seat] = keep(p)
			return
		}
		heldSeats = append(heldSeats, seat)
		want, have := placement.Terms[seat-1], strategy.TermOf(s, p)
		if have == want {
			return
		}
		_, haveGone := active[have]
		if haveGone && p.Spec.NodeName != "" {
			// The term's capacity is short, not gone: this pod has its node, so it stays.
			// Only the pods that cannot get one move (their replacements fall back).
			return
		}
		if haveGone && (waiting[want] != nil || stranded[want] != nil) {
			// The fallback term's own pods wait for capacity too: sending more there
			// only adds to the wait. Move once they run.
			heldForFallback++
			return
		}
		m := move{pod: keep(p), seat: seat, reason: MoveDrift}
		from, _ := strconv.Atoi(p.Annotations[strategy.AnnotationFallbackFrom])
		switch {
		case haveGone:
			m.reason = MoveStranded
			m.why = fmt.Sprintf("term %d (%s) is unavailable; its seat %d goes to term %d (%s)", have+1, termLabels(s, have), seat, want+1, termLabels(s, want))
		case from == want+1:
			l.termBack(w, rev.uid, s, want, rec)
			m.reason = MoveReturn
			m.why = fmt.Sprintf("seat %d's own term %d (%s) is available again; moving it back from term %d", seat, want+1, termLabels(s, want), have+1)
		default:
			m.why = fmt.Sprintf("seat %d is on term %d (%s), the strategy places it on term %d (%s)", seat, have+1, termLabels(s, have), want+1, termLabels(s, want))
		}
		moves = append(moves, m)
	}
	l.cfg.Caches.EachPodOf(cached, consider)
	for _, p := range unplaced {
		consider(p)
	}
	if live >= n {
		held := make([]bool, n+1) // n is at most live: no bigger than the pods that exist
		for _, seat := range heldSeats {
			held[seat] = true
		}
		var free []int
		for seat := 1; seat <= n; seat++ {
			if !held[seat] {
				free = append(free, seat)
			}
		}
		seats := make([]int, 0, len(above))
		for seat := range above {
			seats = append(seats, seat)
		}
		sort.Sort(sort.Reverse(sort.IntSlice(seats)))
		for i := 0; i < len(seats) && i < len(free); i++ {
			moves = append(moves, move{pod: above[seats[i]], seat: seats[i], reason: MoveSeatAbove,
				why: fmt.Sprintf("seat %d is above the replica count %d while seat %d is free", seats[i], n, free[i])})
		}
	}
	moves = l.canaryFirst(w, rev.uid, s, moves, landed, landing)
	if heldForFallback > 0 {
		l.blocked(w, rev.uid, fmt.Sprintf("%d stranded pods wait to move: their fallback term's own pods wait for capacity too", heldForFallback))
	}
	res.off = len(moves) > 0 || len(stranded) > 0
	if struck {
		// Give every replica's informer a pass to see the new record before the
		// evicted pods' replacements are admitted, or they would strand again.
		res.pending = len(moves)
		return res
	}
	if len(moves) == 0 {
		delete(l.blockedSaid, rev.uid)
		return res
	}
	if optOut {
		res.pending = len(moves)
		l.blocked(w, rev.uid, fmt.Sprintf("%d pods off their placement; not moved: %s is %q", len(moves), strategy.AnnotationConverge, "false"))
		return res
	}
	if placement.Stuck {
		// Nowhere better to go: moving would only recreate them where they are.
		kept := moves[:0]
		for _, m := range moves {
			if m.reason != MoveStranded {
				kept = append(kept, m)
			}
		}
		moves = kept
	}
	res.pending = l.evictWithinBudget(ctx, w, rev, ready, moves, log)
	return res
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
		if room > 0 && unavailable+room > budget {
			left++
			blockedBy = fmt.Sprintf("%d of %d pods unavailable, budget %d", unavailable, rev.replicas, budget)
			if rev.rolling {
				blockedBy = "a rollout is in progress"
			}
			continue
		}
		if l.leading != nil && !l.leading() {
			// No longer sure to be the only one moving pods: leave the rest to the leader.
			left++
			blockedBy = "this replica is no longer sure to lead the convergence loop"
			l.cfg.Metrics.evictions.WithLabelValues(m.reason, "fenced").Inc()
			continue
		}
		err := l.evict(ctx, m.pod)
		switch {
		case err == nil:
			unavailable += cost
			l.evicted[m.pod.UID] = time.Now()
			if m.reason == MoveReturn {
				if from, err := strconv.Atoi(m.pod.Annotations[strategy.AnnotationFallbackFrom]); err == nil {
					l.returning[uidTerm(rev.uid, from-1)] = time.Now()
				}
			}
			l.cfg.Metrics.evictions.WithLabelValues(m.reason, "evicted").Inc()
			msg := fmt.Sprintf("evicted pod %s (%s): %s", m.pod.Name, m.reason, m.why)
			l.event(w, corev1.EventTypeNormal, ReasonConverge, msg)
			log.WithFields(logrus.Fields{"pod": m.pod.Name, "reason": m.reason, "unavailable": unavailable, "budget": budget}).Info(msg)
		case apierrors.IsTooManyRequests(err):
			// A PodDisruptionBudget says not now.
			left++
			blockedBy = "a PodDisruptionBudget refuses the eviction: " + err.Error()
			l.cfg.Metrics.evictions.WithLabelValues(m.reason, "refused").Inc()
		case apierrors.IsNotFound(err):
		default:
			left++
			log.WithError(err).WithField("pod", m.pod.Name).Warn("eviction failed")
		}
	}
	if left > 0 && blockedBy != "" {
		l.blocked(w, rev.uid, fmt.Sprintf("%d pods wait to move: %s", left, blockedBy))
	} else {
		delete(l.blockedSaid, rev.uid)
	}
	return left
}

// canaryFirst keeps, of the moves back to a term whose cool-down ended, only one until a
// pod has landed there (Ready, created since the cool-down ended): the term may still
// have no capacity, and a budget's worth of pods Pending for FALLBACK_AFTER at each
// cool-down's end is what a canary avoids. While the canary is on its way, none.
func (l *Loop) canaryFirst(w *clusterview.Workload, uid types.UID, s *strategy.Strategy, moves []move, landed, landing map[int]bool) []move {
	termOf := func(m move) int {
		t, _ := strconv.Atoi(m.pod.Annotations[strategy.AnnotationFallbackFrom])
		return t - 1
	}
	canary := map[int]int{} // term -> the highest seat moving back there: the canary
	for _, m := range moves {
		if t := termOf(m); m.reason == MoveReturn && m.seat > canary[t] {
			canary[t] = m.seat
		}
	}
	kept := moves[:0]
	held := 0
	for _, m := range moves {
		t := termOf(m)
		switch {
		case m.reason != MoveReturn, landed[t]:
			kept = append(kept, m)
		case landing[t] || time.Since(l.returning[uidTerm(uid, t)]) < returnGrace || m.seat != canary[t]:
			held++
		default:
			kept = append(kept, m)
		}
	}
	for t := range canary {
		if !landed[t] {
			if key := uidTerm(uid, t) + "/canary"; !l.said[key] {
				l.said[key] = true
				msg := fmt.Sprintf("term %d (%s): one pod goes back first; the other %d wait until it is Running and Ready there", t+1, termLabels(s, t), held)
				l.event(w, corev1.EventTypeNormal, ReasonTermBack, msg)
				l.cfg.Log.WithField("workload", w.Describe()).Info(msg)
			}
		}
	}
	return kept
}

// returnGrace is how long a canary's eviction counts as on its way before its
// replacement shows up as a pod (the ReplicaSet controller recreates it in moments).
const returnGrace = 30 * time.Second

func uidTerm(uid types.UID, term int) string { return string(uid) + "/" + strconv.Itoa(term) }

// launching says once per term and flight state why waiting pods do not make their term
// unavailable: Karpenter is bringing them capacity.
func (l *Loop) launching(w *clusterview.Workload, uid types.UID, s *strategy.Strategy, term int, g *pendingPods, f karpenter.Flight) {
	key := fmt.Sprintf("%s/%d/launching/%d", uid, term, f.Launching)
	if l.said[key] {
		return
	}
	l.said[key] = true
	l.cfg.Metrics.launchWaits.WithLabelValues(s.Terms[term].LabelString()).Inc()
	l.cfg.Log.WithFields(logrus.Fields{"workload": w.Describe(), "term": term + 1, "launching": f.Launching, "registered": f.Registered}).
		Infof("term %d (%s): %d pods unschedulable for %s, not unavailable: Karpenter is launching capacity for it (%s)",
			term+1, s.Terms[term].LabelString(), g.count, g.age(time.Now()), f)
}

// termBack says once per cool-down that a term is tried again.
func (l *Loop) termBack(w *clusterview.Workload, uid types.UID, s *strategy.Strategy, term int, rec *Record) {
	key := string(uid) + "/" + strconv.Itoa(term)
	if rec != nil {
		if st, ok := rec.Terms[term]; ok {
			key += "/" + st.Until.String()
		}
	}
	if l.said[key] {
		return
	}
	l.said[key] = true
	msg := fmt.Sprintf("term %d (%s) is tried again after its cool-down: moving its seats back from the fallback, a few pods at a time", term+1, termLabels(s, term))
	l.event(w, corev1.EventTypeNormal, ReasonTermBack, msg)
	l.cfg.Log.WithField("workload", w.Describe()).Info(msg)
}

// blocked says once per distinct situation why moves wait.
func (l *Loop) blocked(w *clusterview.Workload, uid types.UID, msg string) {
	key := msg
	if i := strings.Index(msg, ":"); i > 0 {
		key = msg[i:]
	}
	if l.blockedSaid[uid] == key {
		return
	}
	l.blockedSaid[uid] = key
	l.event(w, corev1.EventTypeNormal, ReasonConvergeBlocked, msg)
	l.cfg.Log.WithField("workload", w.Describe()).Info(msg)
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

func (l *Loop) event(w *clusterview.Workload, typ, reason, msg string) {
	if l.cfg.Recorder == nil {
		return
	}
	ref := w.Ref
	l.cfg.Recorder.Event(&ref, typ, reason, msg)
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

// pendingOn collects the UIDs of the revision's placed pods on term that wait for a node
// (only when a term is marked: a pass copies no pod it does not need).
func pendingOn(caches *clusterview.Caches, rev clusterview.Revision, s *strategy.Strategy, term int) map[types.UID]bool {
	out := map[types.UID]bool{}
	caches.EachPodOf(rev, func(p *corev1.Pod) {
		if _, ok := unschedulableSince(p); ok && strategy.HoldsSeat(p) && strategy.TermOf(s, p) == term {
			out[p.UID] = true
		}
	})
	return out
}

// unschedulableSince returns since when a Pending pod without a node has been found
// unschedulable by the scheduler.
func unschedulableSince(p *corev1.Pod) (time.Time, bool) {
	if p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" || p.DeletionTimestamp != nil {
		return time.Time{}, false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			since := c.LastTransitionTime.Time
			if since.IsZero() {
				since = p.CreationTimestamp.Time
			}
			return since, true
		}
	}
	return time.Time{}, false
}

func isReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// pendingPods are a term's placed pods found unschedulable: how many, and the one
// unschedulable longest (kept: Karpenter's word is read from its Events).
type pendingPods struct {
	count  int
	oldest *corev1.Pod
	since  time.Time
}

// add counts p, unschedulable since since; a nil g starts a group.
func (g *pendingPods) add(p *corev1.Pod, since time.Time) *pendingPods {
	if g == nil {
		g = &pendingPods{}
	}
	g.count++
	if g.oldest == nil || since.Before(g.since) {
		g.oldest, g.since = keep(p), since
	}
	return g
}

// age is how long the oldest pod has been unschedulable.
func (g *pendingPods) age(now time.Time) time.Duration { return now.Sub(g.since).Round(time.Second) }

// keep copies a pod the cache lent (Caches.EachPodOf) for use after the call.
func keep(p *corev1.Pod) *corev1.Pod {
	kept := *p
	return &kept
}

func termLabels(s *strategy.Strategy, t int) string {
	if t < 0 || t >= len(s.Terms) {
		return "?"
	}
	return s.Terms[t].LabelString()
}

// fallbackSummary says where unavailable terms' seats go: "placing its seats on term 1".
func fallbackSummary(p strategy.Placement) string {
	if p.Stuck {
		return "no other term with a weight or a base is available: pods stay where they are"
	}
	seen := map[int]bool{}
	var to []string
	for seat := 1; seat <= len(p.Terms); seat++ {
		if t := p.Terms[seat-1]; p.Fallback(seat) && !seen[t] {
			seen[t] = true
			to = append(to, strconv.Itoa(t+1))
		}
	}
	switch len(to) {
	case 0:
		return "its seats go to the available terms"
	case 1:
		return "placing its seats on term " + to[0]
	}
	return "placing its seats on terms " + strings.Join(to, ", ")
}

func unavailableList(s *strategy.Strategy, active map[int]TermState) string {
	terms := make([]int, 0, len(active))
	for t := range active {
		terms = append(terms, t)
	}
	sort.Ints(terms)
	parts := make([]string, len(terms))
	for i, t := range terms {
		parts[i] = fmt.Sprintf("term %d (%s) until %s: %s", t+1, termLabels(s, t), active[t].Until.UTC().Format(time.RFC3339), active[t].Reason)
	}
	return strings.Join(parts, "; ")
}
