package converge

// Observe: one revision as the loop sees it, read from the caches (and from the API
// server only where they cannot tell: pods admitted without a seat, Karpenter's word).

import (
	"context"
	"fmt"
	"maps"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/interruption"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/unavailability"
)

// snapshot is one revision as a pass found it: everything plan decides from.
type snapshot struct {
	rev revision
	w   *clusterview.Workload
	s   *strategy.Strategy
	// origin is where the strategy came from (the term gauges' source label).
	origin strategy.Origin
	// hold says why none of its pods are moved ("": they may be): its converge
	// annotation is "false", its policy is suspended, or moves are stopped in its
	// namespace or cluster-wide (Config.Stopped). The loop still detects and says.
	hold string
	// timing is when its non-urgent moves may happen (window.go).
	timing strategy.Timing
	now    time.Time
	rec    *unavailability.Record
	// active holds the terms unavailable now (those of rec the strategy still has).
	active map[int]unavailability.TermState
	// pods are the revision's cached placed pods, terminating ones included; unplaced,
	// its live pods admitted without a seat (listed only when the revision is short).
	pods, unplaced []clusterview.PlacedPod
	survey         survey
	// signals holds Karpenter's word on the terms whose pods wait for a node.
	signals map[int]capacitySignal
	// nominated holds the waiting pods of a term marked unavailable that Karpenter
	// nominated for the capacity it still brings: they wait for their node rather than
	// move (readNominations).
	nominated map[types.UID]bool
	// risk holds EC2's word on the terms that have a signalled node (Config.Interruptions).
	risk map[int]interruption.Verdict
	// listFailed: the unplaced pods could not be listed (the pass is retried).
	listFailed bool
}

// capacitySignal is what Karpenter says of a term whose pods wait for a node.
type capacitySignal struct {
	// word: why the NodePools serving the term cannot launch ("": nothing said).
	word string
	// flight: what Karpenter launches for the term; read only for stranded pods it
	// said nothing about, when Config.Launches is set.
	flight *karpenter.Flight
}

// observe reads revision rev as the caches show it at now; ok is false when it has no
// active, valid strategy (admission already said why).
func (l *Loop) observe(ctx context.Context, rev revision, now time.Time) (*snapshot, bool) {
	w, err := l.cfg.Caches.Resolver.ResolveRevision(ctx, rev.namespace, rev.kind, rev.name, rev.uid)
	if err != nil {
		return nil, false
	}
	chain := append([]strategy.AnnotatedObject{{Name: "pod template", Annotations: rev.templateAnnotations}}, w.Chain...)
	src := l.strategies.Resolve(chain...)
	if !src.Active() || src.Err != nil {
		return nil, false
	}
	snap := &snapshot{rev: rev, w: w, s: src.Strategy, origin: src.Origin, now: now, signals: map[int]capacitySignal{}}
	snap.hold = l.holdOf(w.Chain, src.Object, rev.namespace)
	if rev.kind == "Job" && snap.hold == "" {
		// A killed batch pod loses its work, and the Job controller counts it as failed
		// against its backoffLimit: unless the Job or its policy opts in, the loop still
		// marks terms unavailable (new seats go to the fallback) and reports, but moves
		// no running Job pod.
		snap.hold = strategy.JobHeld(chain, src.Object)
	}
	snap.timing = strategy.TimingOf(chain, src.Object, l.cfg.Timing)
	snap.rec = l.cfg.Records.Get(rev.uid)
	snap.active = snap.rec.Active(now)
	for t := range snap.active {
		if t >= len(snap.s.Terms) {
			delete(snap.active, t) // a record older than a strategy with fewer terms
		}
	}
	// The pods go into the loop's buffer: one worker passes one revision at a time, and
	// a plan keeps copies of the few pods it moves.
	l.pods = l.pods[:0]
	l.cfg.Caches.EachPodOf(clusterview.Revision{Namespace: rev.namespace, UID: rev.uid}, func(p clusterview.PlacedPod) {
		l.pods = append(l.pods, p)
	})
	snap.pods = l.pods
	snap.survey = surveyPods(snap.pods, snap.s, now, l.cfg.FallbackAfter)
	l.readSignals(ctx, snap)
	l.readNominations(ctx, snap)
	l.readInterruptions(snap)
	if l.mem.shouldList(rev.uid, snap.survey.placedLive < rev.replicas, now) {
		snap.unplaced, err = l.unplaced(ctx, rev)
		if err != nil {
			l.cfg.Log.WithError(err).WithField("workload", w.Describe()).Warn("cannot list the revision's pods")
			snap.listFailed = true
		}
		if len(snap.unplaced) == 0 {
			l.mem.listedNone(rev.uid, now)
		}
	}
	return snap, true
}

// holdOf says why the loop moves none of a revision's pods ("": it may): its chain says
// so (strategy.Held: its workload opted out, or its policy is suspended), or
// Config.Stopped for its namespace.
func (l *Loop) holdOf(chain []strategy.AnnotatedObject, source, namespace string) string {
	if why := strategy.Held(chain, source); why != "" {
		return why
	}
	return l.stopped(namespace)
}

// readSignals asks Karpenter about the terms whose pods wait for a node: stranded ones
// (past FALLBACK_AFTER) always, waiting ones when Karpenter may already say it cannot
// launch. Its answers are what unavailableBecause weighs.
func (l *Loop) readSignals(ctx context.Context, snap *snapshot) {
	signals, launches := l.cfg.Signals, l.cfg.Launches
	for t := range snap.s.Terms {
		if _, on := snap.active[t]; on {
			continue
		}
		var sig capacitySignal
		switch g := snap.survey.stranded[t]; {
		case g != nil:
			if signals != nil {
				sig.word = signals.Unlaunchable(ctx, snap.s.Terms[t].LabelMap(), []clusterview.PlacedPod{g.oldest})
			}
			if sig.word == "" && launches != nil {
				f := launches.Flight(snap.s.Terms[t].LabelMap(), snap.now)
				sig.flight = &f
			}
		case snap.survey.waiting[t] != nil && signals != nil:
			sig.word = signals.Unlaunchable(ctx, snap.s.Terms[t].LabelMap(), []clusterview.PlacedPod{snap.survey.waiting[t].oldest})
		default:
			continue
		}
		snap.signals[t] = sig
	}
}

// readNominations asks Karpenter which waiting pods it nominated for the capacity it is
// still bringing to a term marked unavailable (a NodePool whose limits left room for
// some of a burst's pods and not all). Those pods wait for that capacity: evicting them
// would waste the nodes launched for them. The nomination counts only while the term's
// NodeClaims progress (karpenter.Flight): a claim that failed ends it, and its pods
// move then. (A pass that marks a term moves nothing, so marked terms are enough.)
func (l *Loop) readNominations(ctx context.Context, snap *snapshot) {
	if l.cfg.Signals == nil || l.cfg.Launches == nil {
		return
	}
	waiting := map[types.UID]bool{}
	for t := range snap.s.Terms {
		if _, on := snap.active[t]; !on {
			continue
		}
		if f := l.cfg.Launches.Flight(snap.s.Terms[t].LabelMap(), snap.now); !f.Progressing(snap.now, l.cfg.FallbackAfter) {
			continue
		}
		maps.Copy(waiting, pendingOn(snap, t))
	}
	if len(waiting) == 0 {
		return
	}
	nominated, err := l.cfg.Signals.Nominated(ctx, snap.rev.namespace, waiting)
	if err != nil {
		l.cfg.Log.WithError(err).WithField("workload", snap.w.Describe()).Warn("cannot read Karpenter's nominations; the waiting pods of an unavailable term move")
		return
	}
	snap.nominated = nominated
}

// readInterruptions asks, for each term, which of its nodes had an EC2 signal within the
// window (in memory: the interruption poller keeps them), and keeps the verdicts of the
// terms that have one.
func (l *Loop) readInterruptions(snap *snapshot) {
	ir := l.cfg.Interruptions
	if ir == nil {
		return
	}
	for t, term := range snap.s.Terms {
		if v := ir.Assess(term, snap.now); len(v.Signalled) > 0 {
			if snap.risk == nil {
				snap.risk = map[int]interruption.Verdict{}
			}
			snap.risk[t] = v
		}
	}
}

// unplaced lists the revision's live pods that carry no seat, by its selector: only
// pods without the managed label (the cache has the others; a revision is short of
// placed pods through every big scale-up, and listing all its pods then moved
// thousands of them to find none).
func (l *Loop) unplaced(ctx context.Context, rev revision) ([]clusterview.PlacedPod, error) {
	selector, err := metav1.LabelSelectorAsSelector(rev.selector)
	if err != nil {
		return nil, fmt.Errorf("selector of %s %s/%s: %w", rev.kind, rev.namespace, rev.name, err)
	}
	unmanaged, err := labels.NewRequirement(strategy.LabelManaged, selection.DoesNotExist, nil)
	if err != nil {
		return nil, fmt.Errorf("selector of unplaced pods: %w", err)
	}
	selector = selector.Add(*unmanaged)
	list, err := l.cfg.Client.CoreV1().Pods(rev.namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return nil, fmt.Errorf("list pods of %s %s/%s: %w", rev.kind, rev.namespace, rev.name, err)
	}
	var out []clusterview.PlacedPod
	for i := range list.Items {
		p := &list.Items[i]
		if !metav1.IsControlledBy(p, &metav1.ObjectMeta{UID: rev.uid}) || !strategy.HoldsSeat(p) {
			continue
		}
		// A pod the objectSelector keeps from the webhook was never to be placed.
		if _, seated := strategy.SeatOf(p); !seated && l.cfg.Scope.CoversPod(p.Namespace, p.Labels) {
			out = append(out, clusterview.PlacedPodOf(p))
		}
	}
	return out, nil
}

// survey is what a revision's placed pods say: how many hold a seat, per term, and the
// ones unschedulable, stranded (past FALLBACK_AFTER) or still waiting.
type survey struct {
	placedLive        int
	placedOn          []int
	stranded, waiting map[int]*pendingPods
}

func surveyPods(pods []clusterview.PlacedPod, s *strategy.Strategy, now time.Time, fallbackAfter time.Duration) survey {
	sv := survey{placedOn: make([]int, len(s.Terms)), stranded: map[int]*pendingPods{}, waiting: map[int]*pendingPods{}}
	for _, pod := range pods {
		if !pod.HoldsSeat() {
			continue
		}
		sv.placedLive++
		t := pod.TermIn(s)
		if t >= 0 {
			sv.placedOn[t]++
		}
		since, ok := pod.UnschedulableFor()
		if t < 0 || !ok {
			continue
		}
		group := sv.waiting
		if now.Sub(since) >= fallbackAfter {
			group = sv.stranded
		}
		group[t] = group[t].add(pod, since)
	}
	return sv
}

// pendingPods are a term's placed pods found unschedulable: how many, and the one
// unschedulable longest (Karpenter's word is read from its Events).
type pendingPods struct {
	count  int
	oldest clusterview.PlacedPod
	since  time.Time
}

// add counts p, unschedulable since since; a nil g starts a group.
func (g *pendingPods) add(p clusterview.PlacedPod, since time.Time) *pendingPods {
	if g == nil {
		g = &pendingPods{}
	}
	g.count++
	if g.count == 1 || since.Before(g.since) {
		g.oldest, g.since = p, since
	}
	return g
}

// age is how long the oldest pod has been unschedulable.
func (g *pendingPods) age(now time.Time) time.Duration { return now.Sub(g.since).Round(time.Second) }

// isUnschedulable reports whether p waits for a node: the pods a strike's reason counts
// Karpenter's nominations among.
func isUnschedulable(p clusterview.PlacedPod) bool {
	_, ok := p.UnschedulableFor()
	return ok && p.HoldsSeat()
}
