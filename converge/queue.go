package converge

// The work queue: a revision is passed when something that matters to it changes,
// not on a timer over all of them, so the loop's cost follows the changes, not the
// cluster's size.
//
// What queues a revision (Interval later, so a burst of changes makes one pass):
//   - its placed pods, itself, its Deployment or Argo Rollout or a sibling ReplicaSet
//     (clusterview's OnRevisionChange);
//   - its unavailability record (unavailability.Records.OnChange);
//   - a policy or namespace default that may govern it (PoliciesChanged);
//   - a new EC2 interruption signal (InterruptionSignalled);
//   - time, while it is not settled: pods waiting for a node (FALLBACK_AFTER runs, and
//     Karpenter's word on them is read on each pass), moves left, fewer placed pods than
//     replicas; and the end of an unavailable term's cool-down;
//   - a failed or cut-short pass, retried with backoff;
//   - leadership won, and every Resync, over all revisions (the safety net).
//
// A revision that is settled and sees no change is not passed at all.

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
)

// housekeepingKey is the queue item of the housekeeping (stale records, old
// evictions): it runs on the queue's one worker, like the passes, so the loop's state
// has one writer.
const housekeepingKey = types.UID("")

// housekeepingEvery is how often the housekeeping runs; its cost is the records, which
// exist only for revisions that lost capacity.
const housekeepingEvery = 30 * time.Second

// revisionQueue holds the UIDs of the revisions to pass; one worker takes them.
type revisionQueue = workqueue.TypedRateLimitingInterface[types.UID]

// newRevisionQueue returns a queue whose retries back off per revision, from interval
// doubling up to 5 minutes (client-go's rate limiter).
func newRevisionQueue(interval time.Duration) revisionQueue {
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](interval, 5*time.Minute)
	return workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "converge"})
}

// changed queues revision uid for a pass Interval from now, while this replica leads.
// It runs on informer goroutines.
func (l *Loop) changed(uid types.UID) {
	if q := l.queue.Load(); q != nil {
		(*q).AddAfter(uid, l.cfg.Interval)
	}
}

// PoliciesChanged queues every current revision of namespace ("": of every namespace)
// for a pass Interval from now, while this replica leads: a policy or a namespace
// default changed, and the strategy of workloads without their own may have with it.
// Each pass moves at most its workload's budget, as after an annotation change. It runs
// on informer goroutines.
func (l *Loop) PoliciesChanged(namespace string) {
	q := l.queue.Load()
	if q == nil {
		return
	}
	for _, rev := range l.revisions() {
		if namespace == "" || rev.namespace == namespace {
			(*q).AddAfter(rev.uid, l.cfg.Interval)
		}
	}
}

// InterruptionSignalled queues every current revision for a pass Interval from now,
// while this replica leads: a node had a new EC2 signal, and any revision may have a
// term at risk or pods on the node. It runs on the interruption poller's goroutine.
func (l *Loop) InterruptionSignalled() { l.PoliciesChanged("") }

// resyncEvery queues the housekeeping every housekeepingEvery and every current
// revision at once and then every Resync, until ctx ends.
func (l *Loop) resyncEvery(ctx context.Context, q revisionQueue) {
	all := func() {
		for _, rev := range l.revisions() {
			q.Add(rev.uid)
		}
	}
	all()
	resync := time.NewTicker(l.cfg.Resync)
	defer resync.Stop()
	housekeeping := time.NewTicker(housekeepingEvery)
	defer housekeeping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-resync.C:
			all()
		case <-housekeeping.C:
			q.Add(housekeepingKey)
		}
	}
}

// processNext passes the next queued revision and queues it again as its result says;
// false once the queue is shut down.
func (l *Loop) processNext(ctx context.Context, q revisionQueue) bool {
	uid, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(uid)
	if uid == housekeepingKey {
		l.housekeep(ctx, time.Now())
		return true
	}
	rev, ok := l.revisionByUID(uid)
	if !ok {
		l.forgetRevision(ctx, uid)
		q.Forget(uid)
		return true
	}
	res := l.passRevision(ctx, rev)
	outcome := "settled"
	switch {
	case ctx.Err() != nil:
		return true
	case res.failed:
		outcome = "retried"
		q.AddRateLimited(uid)
	case res.unsettled:
		outcome = "unsettled"
		q.Forget(uid)
		q.AddAfter(uid, l.cfg.Interval)
	case !res.until.IsZero():
		q.Forget(uid)
		q.AddAfter(uid, time.Until(res.until))
	default:
		q.Forget(uid)
	}
	l.cfg.Metrics.passes.WithLabelValues(outcome).Inc()
	l.cfg.Metrics.queueDepth.Set(float64(q.Len()))
	return true
}

// passRevision makes one revision's pass within PassDeadline and publishes the sums.
func (l *Loop) passRevision(ctx context.Context, rev revision) result {
	now := time.Now()
	pass, cancel := context.WithTimeout(ctx, l.cfg.PassDeadline)
	defer cancel()
	res := l.converge(pass, rev, now)
	l.mem.noteResult(rev.uid, res, now)
	l.publish(now)
	return res
}

// forgetRevision drops what the loop remembers of a revision that is no longer
// current, and its unavailability record at once when it is gone altogether (one
// scaled to zero keeps it until it goes stale: its cool-down history).
func (l *Loop) forgetRevision(ctx context.Context, uid types.UID) {
	if l.mem.forget(uid) {
		l.publish(time.Now())
	}
	if rec := l.cfg.Records.Get(uid); rec != nil && !l.exists(uid) {
		if err := l.cfg.Records.Forget(ctx, rec, l.cfg.Cooldown, true); err != nil {
			l.cfg.Log.WithError(err).Warn("cannot drop the unavailability record of a deleted revision")
		}
	}
}

// housekeep drops stale unavailability records, evictions the cache has had a minute
// to show, and what the loop remembers of revisions that are no longer current (a
// change it missed).
func (l *Loop) housekeep(ctx context.Context, now time.Time) {
	l.mem.expireEvictions(now)
	for uid := range l.mem.results {
		if _, ok := l.revisionByUID(uid); !ok {
			l.forgetRevision(ctx, uid)
		}
	}
	for _, rec := range l.cfg.Records.All() {
		if err := l.cfg.Records.Forget(ctx, rec, l.cfg.Cooldown, !l.exists(rec.Revision)); err != nil {
			l.cfg.Log.WithError(err).Warn("cannot drop a stale unavailability record")
		}
	}
}

// publish sets the gauges from the sums: a scrape sees the revisions' last results.
func (l *Loop) publish(now time.Time) {
	m, s := l.cfg.Metrics, l.mem.sums
	m.fallback.Set(float64(s.fallbackPods))
	m.pending.Set(float64(s.pending))
	for i, n := range s.waiting {
		m.waiting.WithLabelValues(waitNames[i]).Set(float64(n))
	}
	var lag time.Duration
	for _, since := range l.mem.offSince {
		lag = max(lag, now.Sub(since))
	}
	m.lag.Set(lag.Seconds())
	m.held.Set(float64(l.mem.heldRevisions()))
	stopped := 0.0
	if l.stopped("") != "" {
		stopped = 1
	}
	m.stopped.Set(stopped)
	m.termTarget.Reset()
	m.termPods.Reset()
	for k, n := range s.target {
		m.termTarget.WithLabelValues(k.term, string(k.source)).Set(float64(n))
	}
	for k, n := range s.placed {
		m.termPods.WithLabelValues(k.term, string(k.source)).Set(float64(n))
	}
	for k := range s.target {
		if _, ok := s.placed[k]; !ok {
			m.termPods.WithLabelValues(k.term, string(k.source)).Set(0)
		}
	}
	for _, state := range []strategy.State{strategy.StateExact, strategy.StateFallback, strategy.StateOffTarget} {
		m.states.WithLabelValues(string(state)).Set(float64(s.states[state]))
	}
	byTerm(m.unavailable, s.unavailable)
	byTerm(m.unserved, s.unserved)
}

// byTerm sets g, reset, to sums added up by term (over the strategies' sources).
func byTerm(g *prometheus.GaugeVec, sums map[termSource]int) {
	g.Reset()
	terms := map[string]int{}
	for k, n := range sums {
		terms[k.term] += n
	}
	for term, n := range terms {
		g.WithLabelValues(term).Set(float64(n))
	}
}
