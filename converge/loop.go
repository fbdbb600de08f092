package converge

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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
	l.cfg.Metrics.unavailable.Reset()
	revs, exists := l.revisions()
	sums, seen := l.convergeAll(ctx, l.resumeOrder(revs), now)
	sums.publish(l.cfg.Metrics)
	l.forgetGone(seen, now)
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

// resumeOrder sorts revs to start where the last pass ran out of time, so no revision
// waits for ever behind the others.
func (l *Loop) resumeOrder(revs []revision) []revision {
	sort.Slice(revs, func(i, j int) bool { return revs[i].uid < revs[j].uid })
	if l.resume != "" {
		at := sort.Search(len(revs), func(i int) bool { return revs[i].uid >= l.resume })
		revs = append(revs[at:], revs[:at]...)
	}
	l.resume = ""
	return revs
}

// passSums is what a pass reports over all revisions.
type passSums struct {
	lag                   time.Duration // the longest a revision has been off its placement
	fallbackPods, pending int
	target, placed        map[string]int // by term label string
}

// convergeAll converges each revision until ctx ends; the ones it does not reach keep
// what they had and go first next time. seen holds every revision of revs.
func (l *Loop) convergeAll(ctx context.Context, revs []revision, now time.Time) (passSums, map[types.UID]bool) {
	sums := passSums{target: map[string]int{}, placed: map[string]int{}}
	seen := map[types.UID]bool{}
	for i, rev := range revs {
		seen[rev.uid] = true
		if ctx.Err() != nil {
			if l.resume == "" {
				l.resume = rev.uid
				l.cfg.Metrics.passesCut.Inc()
				l.cfg.Log.WithField("left", len(revs)-i).Warn("convergence pass ran out of time; the rest go first in the next one")
			}
			if since, ok := l.offSince[rev.uid]; ok {
				sums.lag = max(sums.lag, now.Sub(since))
			}
			continue
		}
		res := l.converge(ctx, rev, now)
		for term, n := range res.target {
			sums.target[term] += n
		}
		for term, n := range res.placed {
			sums.placed[term] += n
		}
		sums.fallbackPods += res.fallbackPods
		sums.pending += res.pending
		if !res.off {
			delete(l.offSince, rev.uid)
			continue
		}
		if _, ok := l.offSince[rev.uid]; !ok {
			l.offSince[rev.uid] = now
		}
		sums.lag = max(sums.lag, now.Sub(l.offSince[rev.uid]))
	}
	return sums, seen
}

// publish sets the pass's gauges, all at once after the pass, so a scrape never sees a
// pass's partial sums. A pass cut short leaves out the revisions it did not reach.
func (s passSums) publish(m *Metrics) {
	m.fallback.Set(float64(s.fallbackPods))
	m.pending.Set(float64(s.pending))
	m.lag.Set(s.lag.Seconds())
	m.termTarget.Reset()
	m.termPods.Reset()
	for term, n := range s.target {
		m.termTarget.WithLabelValues(term).Set(float64(n))
		m.termPods.WithLabelValues(term).Set(float64(s.placed[term]))
	}
	for term, n := range s.placed {
		if _, ok := s.target[term]; !ok {
			m.termPods.WithLabelValues(term).Set(float64(n))
		}
	}
}

// forgetGone drops what the loop remembers of revisions the pass did not see, and of
// evictions the cache has had a minute to show.
func (l *Loop) forgetGone(seen map[types.UID]bool, now time.Time) {
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
	for key := range l.returning {
		if uid, _, _ := strings.Cut(key, "/"); !seen[types.UID(uid)] {
			delete(l.returning, key)
		}
	}
	for uid, at := range l.evicted {
		if now.Sub(at) > time.Minute {
			delete(l.evicted, uid)
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

// revPass is one revision's pass: what converge reads, decides and does, step by step
// (detect.go, fallback.go, repair.go). The pods are read from the cache twice
// (detection, then moves) as views: a pass keeps copies only of the pods it may name
// or move, not of all of a revision's.
type revPass struct {
	l      *Loop
	rev    revision
	cached clusterview.Revision
	now    time.Time
	w      *clusterview.Workload
	s      *strategy.Strategy
	// optOut: the workload's converge annotation is "false" (detect and say, move nothing).
	optOut bool
	log    logrus.FieldLogger

	// Detection (survey, markUnavailable).
	rec               *Record
	active            map[int]TermState // unavailable terms now
	struck            bool              // a term was marked unavailable in this pass
	placedLive        int
	placedOn          []int
	stranded, waiting map[int]*pendingPods

	placement strategy.Placement // seats up to the replica count, the unavailable terms left out

	// Moves (planMoves).
	moves           []move
	live, ready     int
	heldSeats       []int
	above           map[int]*corev1.Pod // pods of seats above the replica count
	landed, landing map[int]bool        // terms a returning pod landed on, or is on its way to
	heldForFallback int

	res result
}

// converge makes one revision's pass: find its terms without capacity, place its seats
// around them, and move the pods that are off their placement.
func (l *Loop) converge(ctx context.Context, rev revision, now time.Time) result {
	p, ok := l.startPass(ctx, rev, now)
	if !ok {
		return result{}
	}
	p.survey()
	p.markUnavailable(ctx)
	p.place()
	p.planMoves(p.findUnplaced(ctx))
	return p.act(ctx)
}

// startPass resolves the revision's workload and parses its strategy; ok is false when
// it has no active, valid strategy (admission already said why).
func (l *Loop) startPass(ctx context.Context, rev revision, now time.Time) (*revPass, bool) {
	w, err := l.cfg.Caches.Resolver.Resolve(ctx, rev.namespace, &metav1.OwnerReference{APIVersion: "apps/v1", Kind: rev.kind, Name: rev.name, UID: rev.uid})
	if err != nil {
		return nil, false
	}
	src := strategy.Find(append([]strategy.AnnotatedObject{{Name: "pod template", Annotations: rev.templateAnnotations}}, w.Chain...)...)
	if !src.Active() {
		return nil, false
	}
	s, err := strategy.Parse(src.Raw)
	if err != nil {
		return nil, false
	}
	p := &revPass{l: l, rev: rev, cached: clusterview.Revision{Namespace: rev.namespace, UID: rev.uid}, now: now, w: w, s: s,
		log: l.cfg.Log.WithFields(logrus.Fields{"workload": w.Describe(), "revision": rev.name})}
	for _, o := range w.Chain {
		if v, ok := o.Annotations[strategy.AnnotationConverge]; ok && strings.EqualFold(strings.TrimSpace(v), "false") {
			p.optOut = true
		}
	}
	return p, true
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

func (l *Loop) event(w *clusterview.Workload, typ, reason, msg string) {
	if l.cfg.Recorder == nil {
		return
	}
	ref := w.Ref
	l.cfg.Recorder.Event(&ref, typ, reason, msg)
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
