package converge

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/time/rate"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/interruption"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/unavailability"
)

// Defaults of Config.
const (
	defaultInterval = 2 * time.Second
	// defaultPassDeadline bounds a revision's pass: long enough for its API calls,
	// short enough that a slow API server cannot hold the loop for long.
	defaultPassDeadline = 10 * time.Second
	defaultResync       = 5 * time.Minute
	// defaultMaxEvictionsPerMinute: a return from fallback over a few hundred workloads
	// takes minutes, not seconds, and a defect cannot churn more than this.
	defaultMaxEvictionsPerMinute = 30
	// defaultMaxUnavailableCluster and defaultMaxUnavailablePerNamespace: a policy change
	// over many workloads rolls through a few of them at a time (each within its own
	// budget), not all at once.
	defaultMaxUnavailableCluster      = 20
	defaultMaxUnavailablePerNamespace = 10
)

// Signals is Karpenter's early word on a term (optional): why the NodePools serving
// labels cannot launch capacity for pending pods now, "" when it said nothing.
type Signals interface {
	Unlaunchable(ctx context.Context, labels map[string]string, pending []clusterview.PlacedPod) string
	// Nominated says which of pods (UIDs, of one namespace) Karpenter nominated for
	// capacity.
	Nominated(ctx context.Context, namespace string, pods map[types.UID]bool) (map[types.UID]bool, error)
}

// Interruptions is EC2's early word on a term's nodes (optional; interruption.Tracker):
// which of them had an interruption warning, a rebalance recommendation or a state
// change within the window, and whether that puts the term at risk.
type Interruptions interface {
	Assess(term strategy.Term, now time.Time) interruption.Verdict
}

// Launches says what Karpenter is launching for the capacity a term's labels select
// (karpenter.NodeClaims).
type Launches interface {
	Flight(labels map[string]string, now time.Time) karpenter.Flight
}

// Scope tells where the API server sends pods to the webhook (clusterview.Scope): the
// loop acts only there, since elsewhere every pod is admitted without a seat and a
// moved pod's replacement would be too.
type Scope interface {
	CoversNamespace(ns string) bool
	CoversPod(ns string, podLabels map[string]string) bool
}

// Settings are the loop's knobs a user turns, each one setting of serve
// (docs/configuration.md); the rest of Config is wiring.
type Settings struct {
	// MaxEvictionsPerMinute caps the loop's evictions across the cluster (a token bucket
	// of that size, refilled over a minute), on top of each workload's budget: what any
	// defect can do is bounded. 0: the default, 30.
	MaxEvictionsPerMinute int
	// MaxUnavailableCluster and MaxUnavailablePerNamespace are the pace: how many pods
	// the loop evicted from a node may be unavailable at once (no Ready replacement
	// yet), across the cluster and in one namespace, on top of each workload's budget.
	// Moves that wait for it go in order: namespace, then workload name. 0: the
	// defaults, 20 and 10.
	MaxUnavailableCluster, MaxUnavailablePerNamespace int
	// FallbackAfter is how long placed pods may stay Pending and unschedulable before
	// their term is marked unavailable.
	FallbackAfter time.Duration
	// Cooldown is how long a term stays unavailable after its first strike.
	Cooldown time.Duration
	// MaxUnavailable is the per-workload budget of pods not Running and Ready: an int
	// or a percentage of the replicas (rounded down), at least 1.
	MaxUnavailable intstr.IntOrString
	// MoveSignalledNodes: pods on a signalled node of a term not at risk move too (their
	// replacement is placed on the same term); off by default.
	MoveSignalledNodes bool
	// Timing is the cluster's move window and minimum stay on fallback (MOVE_WINDOW,
	// MIN_FALLBACK_STAY): a workload's annotations or its policy's spec override them.
	Timing strategy.Timing
}

// Config is what the loop needs.
type Config struct {
	Client     kubernetes.Interface
	Caches     *clusterview.Caches
	Records    *unavailability.Records
	Recorder   record.EventRecorder
	Metrics    *Metrics
	Namespaces clusterview.NamespaceFilter
	Scope      Scope
	// Settings are the knobs a user turns (docs/configuration.md).
	Settings
	// Interval (default 2s) is how soon a revision is passed after a change, changes
	// within it coalescing into one pass, and how often while it is not settled (pods
	// waiting for a node, moves left, fewer placed pods than replicas).
	Interval time.Duration
	// PassDeadline bounds one revision's pass (default 10s); one cut short is retried.
	PassDeadline time.Duration
	// Resync (default 5m) is the safety net: every revision is passed again this often
	// even when nothing was seen to change.
	Resync  time.Duration
	Signals Signals // optional
	// Served (optional) tells whether any NodePool, node group or node serves a term's
	// labels: a term with a target that nothing serves is counted (terms_unserved), for
	// an alert within minutes (most often a typo in a label).
	Served func(labels map[string]string) bool
	// Launches (optional): a term whose pods have waited FALLBACK_AFTER without a word
	// from Karpenter is not marked unavailable while NodeClaims for it are launching or
	// made progress within FALLBACK_AFTER; time alone counts only from then on.
	Launches Launches
	// Interruptions (optional): a term at risk is marked unavailable (its new seats go
	// to the fallback) until a cool-down after its last signal, and its pods on
	// signalled nodes move there within the budget.
	Interruptions Interruptions
	// Stopped (optional) says why the loop must move no pod of namespace ns now ("":
	// it may), and with ns "" whether every move is stopped: the switches an operator
	// flips during an incident (the converge annotation on the webhook's namespace, or on
	// ns). Read before every eviction.
	Stopped func(ns string) string
	Log     logrus.FieldLogger
}

// Loop is the convergence loop; run it on the elected replica only.
type Loop struct {
	cfg Config
	// running is held by Run: after a lost and regained leadership the new Run waits
	// for the old one's last pass.
	running sync.Mutex
	// mem is what the loop remembers between passes of one term of leadership
	// (memory.go); a new leader starts afresh from the API server.
	mem memory
	// pods is the buffer observe reads a revision's pods into.
	pods []clusterview.PlacedPod
	// queue holds the revisions to pass while Run leads (nil otherwise); informer
	// handlers add to it once they have been handed the initial lists.
	queue          atomic.Pointer[revisionQueue]
	handlersSynced []cache.InformerSynced
	// leading is the leadership fence of the current Run, checked right before each
	// eviction; nil (a loop run without election, as in tests) always leads.
	leading func() bool
	// strategies parses each distinct strategy once, not on every pass.
	strategies strategy.Resolver
	// evictions is the cluster-wide cap on evictions (Config.MaxEvictionsPerMinute).
	evictions *rate.Limiter
}

// NewLoop validates cfg and returns a loop.
func NewLoop(cfg Config) (*Loop, error) {
	if cfg.Client == nil || cfg.Caches == nil || cfg.Records == nil || cfg.Metrics == nil || cfg.Log == nil || cfg.Scope == nil {
		return nil, fmt.Errorf("converge: client, caches, records, metrics, scope and log are required")
	}
	if cfg.MaxEvictionsPerMinute < 0 {
		return nil, fmt.Errorf("converge: MAX_EVICTIONS_PER_MINUTE must not be negative")
	}
	if cfg.MaxEvictionsPerMinute == 0 {
		cfg.MaxEvictionsPerMinute = defaultMaxEvictionsPerMinute
	}
	if cfg.MaxUnavailableCluster < 0 || cfg.MaxUnavailablePerNamespace < 0 {
		return nil, fmt.Errorf("converge: CONVERGE_MAX_UNAVAILABLE_CLUSTER and CONVERGE_MAX_UNAVAILABLE_PER_NAMESPACE must not be negative")
	}
	if cfg.MaxUnavailableCluster == 0 {
		cfg.MaxUnavailableCluster = defaultMaxUnavailableCluster
	}
	if cfg.MaxUnavailablePerNamespace == 0 {
		cfg.MaxUnavailablePerNamespace = defaultMaxUnavailablePerNamespace
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
	if cfg.Resync <= 0 {
		cfg.Resync = defaultResync
	}
	if _, err := Budget(cfg.MaxUnavailable, 10); err != nil {
		return nil, err
	}
	l := &Loop{cfg: cfg, evictions: rate.NewLimiter(rate.Limit(float64(cfg.MaxEvictionsPerMinute)/60), cfg.MaxEvictionsPerMinute)}
	l.reset()
	revisionsSeen, err := cfg.Caches.OnRevisionChange(l.changed)
	if err != nil {
		return nil, err
	}
	recordsSeen, err := cfg.Records.OnChange(l.changed)
	if err != nil {
		return nil, err
	}
	l.handlersSynced = []cache.InformerSynced{revisionsSeen, recordsSeen}
	return l, nil
}

// Run passes the revisions that changed, each after Interval (changes within it make
// one pass), until ctx ends; see queue.go. leading (nil: always) is checked right before
// each eviction; see RunElected.
func (l *Loop) Run(ctx context.Context, leading func() bool) {
	l.running.Lock()
	defer l.running.Unlock()
	l.reset()
	l.leading = leading
	l.cfg.Metrics.leader.Set(1)
	// Every revision is queued once below: the handlers' replay of the initial lists
	// would only queue them twice.
	if !cache.WaitForCacheSync(ctx.Done(), l.handlersSynced...) {
		l.cfg.Metrics.leader.Set(0)
		return
	}
	q := newRevisionQueue(l.cfg.Interval)
	l.queue.Store(&q)
	defer func() {
		l.queue.Store(nil)
		q.ShutDown()
		// Another replica runs the loop now and reports: no stale value of this one's
		// stays beside its own (the alerts take the maximum over the replicas).
		l.cfg.Metrics.leader.Set(0)
		l.cfg.Metrics.queueDepth.Set(0)
		l.cfg.Metrics.Audited(0, 0)
		l.reset()
		l.publish(time.Now())
	}()
	l.cfg.Log.Info("convergence loop started")
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	go l.resyncEvery(ctx, q)
	for l.processNext(ctx, q) {
	}
	l.cfg.Log.Info("convergence loop stopped")
}

// reset forgets what an earlier term of leadership remembered.
func (l *Loop) reset() { l.mem = newMemory() }

// revision is one counting unit the loop looks at.
type revision struct {
	uid                 types.UID
	namespace, name     string
	kind                string // ReplicaSet, StatefulSet or Job
	replicas            int
	templateAnnotations map[string]string
	// selector selects its pods (those admitted without a seat are listed by it).
	selector *metav1.LabelSelector
	// rolling is set while older ReplicaSets of the Deployment (other ReplicaSets of the
	// Rollout) still have replicas, or the StatefulSet controller rolls to a new
	// revision: the rollout is moving pods itself, so the loop's budget is 0.
	rolling bool
}

// Pass passes every current revision once, then does the housekeeping: what Run does
// for the revisions that change, over all of them at once (the tests use it).
func (l *Loop) Pass(ctx context.Context) {
	for _, rev := range l.revisions() {
		if ctx.Err() != nil {
			return
		}
		l.passRevision(ctx, rev)
	}
	l.housekeep(ctx, time.Now())
}

// revisions lists the current revisions with replicas: a Deployment's newest
// ReplicaSet (older ones are being scaled away by the rollout), a Rollout's
// ReplicaSets, bare ReplicaSets, StatefulSets and running Jobs.
func (l *Loop) revisions() []revision {
	r := l.cfg.Caches.Resolver
	var out []revision
	sets, err := r.ReplicaSets.List(labels.Everything())
	if err != nil {
		l.cfg.Log.WithError(err).Warn("cannot list ReplicaSets from the cache")
	}
	for _, rs := range sets {
		if rev, ok := l.replicaSetRevision(rs); ok {
			out = append(out, rev)
		}
	}
	statefulSets, err := r.StatefulSets.List(labels.Everything())
	if err != nil {
		l.cfg.Log.WithError(err).Warn("cannot list StatefulSets from the cache")
	}
	for _, s := range statefulSets {
		if rev, ok := l.statefulSetRevision(s); ok {
			out = append(out, rev)
		}
	}
	if r.Jobs != nil {
		jobs, err := r.Jobs.List(labels.Everything())
		if err != nil {
			l.cfg.Log.WithError(err).Warn("cannot list Jobs from the cache")
		}
		for _, j := range jobs {
			if rev, ok := l.jobRevision(j); ok {
				out = append(out, rev)
			}
		}
	}
	return out
}

// jobRevision is a running Job as a revision: it wants its JobReplicas running. A
// finished Job is none (its pods hold no seat, its record is forgotten).
func (l *Loop) jobRevision(j *batchv1.Job) (revision, bool) {
	replicas := clusterview.JobReplicas(j)
	if replicas <= 0 || !l.acts(j.Namespace) {
		return revision{}, false
	}
	return revision{uid: j.UID, namespace: j.Namespace, name: j.Name, kind: "Job",
		replicas: replicas, templateAnnotations: j.Spec.Template.Annotations, selector: j.Spec.Selector}, true
}

// revisionByUID returns the current revision with uid; ok is false when there is none
// (gone, scaled to zero, an older ReplicaSet of a Deployment, a namespace left alone).
func (l *Loop) revisionByUID(uid types.UID) (revision, bool) {
	if rs, ok := l.cfg.Caches.ReplicaSetByUID(uid); ok {
		return l.replicaSetRevision(rs)
	}
	if s, ok := l.cfg.Caches.StatefulSetByUID(uid); ok {
		return l.statefulSetRevision(s)
	}
	if j, ok := l.cfg.Caches.JobByUID(uid); ok {
		return l.jobRevision(j)
	}
	return revision{}, false
}

// exists reports whether the ReplicaSet, StatefulSet or running Job uid is in the
// caches, with replicas or not: a revision scaled to zero keeps its unavailability
// record while it exists; a finished Job's is forgotten.
func (l *Loop) exists(uid types.UID) bool {
	if _, ok := l.cfg.Caches.ReplicaSetByUID(uid); ok {
		return true
	}
	if _, ok := l.cfg.Caches.StatefulSetByUID(uid); ok {
		return true
	}
	j, ok := l.cfg.Caches.JobByUID(uid)
	return ok && !clusterview.JobFinished(j)
}

func (l *Loop) replicaSetRevision(rs *appsv1.ReplicaSet) (revision, bool) {
	if rs.Spec.Replicas == nil || *rs.Spec.Replicas == 0 || !l.acts(rs.Namespace) {
		return revision{}, false
	}
	rolling := false
	switch owner := metav1.GetControllerOfNoCopy(rs); {
	case owner != nil && owner.Kind == "Deployment":
		d, err := l.cfg.Caches.Resolver.Deployments.Deployments(rs.Namespace).Get(owner.Name)
		if err != nil || d.UID != owner.UID {
			return revision{}, false
		}
		revs := clusterview.RevisionsOf(owner.Kind, rs.Namespace, l.cfg.Caches.ReplicaSetsOf(owner.UID))
		if revs.Current == nil || revs.Current.UID != rs.UID {
			return revision{}, false // an older ReplicaSet, being scaled away
		}
		rolling = revs.Rolling
	case l.cfg.Caches.Resolver.FollowsRollouts() && clusterview.IsRollout(owner):
		// Every ReplicaSet of a Rollout with replicas is a revision of its own (a
		// canary's stable and canary sets both run for as long as its steps last); while
		// more than one has replicas the Rollout controller is moving pods, as a
		// Deployment's rollout does.
		rolling = clusterview.RevisionsOf(owner.Kind, rs.Namespace, l.cfg.Caches.ReplicaSetsOf(owner.UID)).Rolling
	}
	return revision{uid: rs.UID, namespace: rs.Namespace, name: rs.Name, kind: "ReplicaSet",
		replicas: int(*rs.Spec.Replicas), templateAnnotations: rs.Spec.Template.Annotations, selector: rs.Spec.Selector, rolling: rolling}, true
}

// acts reports whether the loop acts on the workloads of namespace ns: the API server
// sends their pods to the webhook (Config.Scope) and the namespace is not left alone.
func (l *Loop) acts(ns string) bool {
	return !l.cfg.Namespaces.Skip(ns) && l.cfg.Scope.CoversNamespace(ns)
}

func (l *Loop) statefulSetRevision(s *appsv1.StatefulSet) (revision, bool) {
	if s.Spec.Replicas == nil || *s.Spec.Replicas == 0 || !l.acts(s.Namespace) {
		return revision{}, false
	}
	return revision{uid: s.UID, namespace: s.Namespace, name: s.Name, kind: "StatefulSet",
		replicas: int(*s.Spec.Replicas), templateAnnotations: s.Spec.Template.Annotations, selector: s.Spec.Selector, rolling: clusterview.StatefulSetRolling(s)}, true
}

// result is what one revision's pass reports: for the metrics, and when to pass it
// again.
type result struct {
	fallbackPods, pending int
	off                   bool
	// target and placed count, by term and where the strategy came from, the pods the
	// revision should have on each term and the live placed pods it has there;
	// unavailable counts its unavailable terms; unserved its terms with a target that
	// no NodePool, node group or node serves.
	target, placed, unavailable, unserved map[termSource]int
	// state is the revision's strategy.Judge verdict ("": not judged).
	state strategy.State
	// unsettled: something may change with time alone (pods wait for a node, moves are
	// left, fewer placed pods than replicas), so the revision is passed again after
	// Interval. failed: the pass was cut short or an API call failed; it is retried
	// with backoff.
	unsettled, failed bool
	// until is the end of the earliest cool-down of its unavailable terms, when their
	// seats return (zero: none).
	until time.Time
	// waiting counts the moves that wait for the window, its cap or the minimum stay.
	waiting [waitKinds]int
}

// judge counts the terms of a revision with a target that nothing serves, and judges
// its pods as spread and the policy status do (strategy.Judge).
func (l *Loop) judge(snap *snapshot) (map[termSource]int, strategy.State) {
	var unserved map[termSource]int
	c := strategy.Conditions{Unavailable: func(i int) (string, bool) { st, ok := snap.active[i]; return st.Reason, ok }}
	if l.cfg.Served != nil {
		// Asked once per term: Judge and the gauge read the same answers.
		notServed := make([]bool, len(snap.s.Terms))
		for i, term := range snap.s.Terms {
			notServed[i] = !l.cfg.Served(term.LabelMap())
		}
		c.Unserved = func(i int) (string, bool) { return "", notServed[i] }
		for i, want := range snap.s.Target(snap.rev.replicas) {
			if want > 0 && notServed[i] {
				if unserved == nil {
					unserved = map[termSource]int{}
				}
				unserved[termSource{snap.s.Terms[i].LabelString(), snap.origin}]++
			}
		}
	}
	// The cached pods and the unplaced ones listed live (when the revision is short of
	// placed pods): the same tally as spread and the policy status.
	each := func(fn func(clusterview.PlacedPod)) {
		for _, pods := range [][]clusterview.PlacedPod{snap.pods, snap.unplaced} {
			for _, p := range pods {
				fn(p)
			}
		}
	}
	return unserved, clusterview.Judge(snap.s, snap.rev.replicas, each, c).State
}

// converge makes one revision's pass: observe it, plan what to do, and act on the plan
// (observe.go, plan.go, act.go).
func (l *Loop) converge(ctx context.Context, rev revision, now time.Time) result {
	snap, ok := l.observe(ctx, rev, now)
	if !ok {
		return result{}
	}
	p := plan(snap, &l.mem, planConfig{fallbackAfter: l.cfg.FallbackAfter, maxUnavailable: l.cfg.MaxUnavailable,
		cooldown: l.cfg.Cooldown, moveSignalled: l.cfg.MoveSignalledNodes})
	res := l.act(ctx, snap, p)
	res.unserved, res.state = l.judge(snap)
	sv := snap.survey
	// Moves all held wait for the hold's end, not the next Interval.
	waitsForHold := p.held > 0 && p.held == len(p.moves)
	res.unsettled = len(sv.waiting) > 0 || len(sv.stranded) > 0 || (!waitsForHold && (res.off || res.pending > 0 || l.mem.short(rev.uid)))
	if waitsForHold && (res.until.IsZero() || p.heldUntil.Before(res.until)) {
		res.until = p.heldUntil
	}
	if !res.off && !l.mem.short(rev.uid) {
		l.mem.settled(rev.uid)
	}
	res.failed = res.failed || snap.listFailed || ctx.Err() != nil
	return res
}
