package converge

// Detection: the terms of a revision whose placed pods cannot get a node.

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// survey reads the revision's unavailability record and counts its placed pods: per
// term, and the ones unschedulable, stranded (past FALLBACK_AFTER) or still waiting.
func (p *revPass) survey() {
	p.rec = p.l.cfg.Records.Get(p.rev.uid)
	p.active = p.rec.Active(p.now)
	for t := range p.active {
		if t >= len(p.s.Terms) {
			delete(p.active, t) // a record older than a strategy with fewer terms
		}
	}
	p.placedOn = make([]int, len(p.s.Terms))
	p.stranded, p.waiting = map[int]*pendingPods{}, map[int]*pendingPods{}
	p.l.cfg.Caches.EachPodOf(p.cached, func(pod *corev1.Pod) {
		if !strategy.HoldsSeat(pod) {
			return
		}
		p.placedLive++
		t := strategy.TermOf(p.s, pod)
		if t >= 0 {
			p.placedOn[t]++
		}
		since, ok := unschedulableSince(pod)
		if t < 0 || !ok {
			return
		}
		group := p.waiting
		if p.now.Sub(since) >= p.l.cfg.FallbackAfter {
			group = p.stranded
		}
		group[t] = group[t].add(pod, since)
	})
}

// markUnavailable records each term found without capacity as unavailable (a strike:
// its seats go to the fallback for a growing cool-down), and says so.
func (p *revPass) markUnavailable(ctx context.Context) {
	for t := range p.s.Terms {
		if _, on := p.active[t]; on {
			continue
		}
		reason := p.unavailableBecause(ctx, t)
		if reason == "" {
			continue
		}
		if p.l.cfg.Signals != nil {
			pending := pendingOn(p.l.cfg.Caches, p.cached, p.s, t)
			if n, err := p.l.cfg.Signals.Nominated(ctx, p.rev.namespace, pending); err == nil {
				reason += fmt.Sprintf("; Karpenter nominated %d of the %d pending pods", n, len(pending))
			}
		}
		p.strike(ctx, t, reason)
	}
	p.res.unavailable = map[string]int{}
	for t := range p.active {
		p.res.unavailable[p.s.Terms[t].LabelString()]++
	}
}

// unavailableBecause says why term t has no capacity, "" when it may have: its pods
// are stranded and Karpenter either says it cannot launch for them or launches nothing,
// or they wait and Karpenter already says it cannot.
func (p *revPass) unavailableBecause(ctx context.Context, t int) string {
	signals := p.l.cfg.Signals
	switch {
	case p.stranded[t] != nil:
		g := p.stranded[t]
		reason := fmt.Sprintf("%d pods unschedulable for %s", g.count, g.age(p.now))
		word := ""
		if signals != nil {
			word = signals.Unlaunchable(ctx, p.s.Terms[t].LabelMap(), []*corev1.Pod{g.oldest})
		}
		switch {
		case word != "":
			return reason + ", " + word
		case p.l.cfg.Launches != nil:
			// Time alone: only once Karpenter has stopped bringing capacity for the term.
			f := p.l.cfg.Launches.Flight(p.s.Terms[t].LabelMap(), p.now)
			if f.Progressing(p.now, p.l.cfg.FallbackAfter) {
				p.l.launching(p.w, p.rev.uid, p.s, t, g, f)
				return ""
			}
			return reason + ", and Karpenter is launching nothing for the term (" + f.String() + ")"
		}
		return reason
	case p.waiting[t] != nil && signals != nil:
		g := p.waiting[t]
		word := signals.Unlaunchable(ctx, p.s.Terms[t].LabelMap(), []*corev1.Pod{g.oldest})
		if word == "" {
			return ""
		}
		return fmt.Sprintf("%d pods unschedulable for %s, %s", g.count, g.age(p.now), word)
	}
	return ""
}

// strike records term t unavailable for reason and says where its seats go now.
func (p *revPass) strike(ctx context.Context, t int, reason string) {
	st, err := p.l.cfg.Records.Strike(ctx, p.rev.uid, p.w.Describe(), t, reason, p.l.cfg.Cooldown)
	if err != nil {
		p.log.WithError(err).Warn("cannot record an unavailable term")
		p.res.failed = true
		return
	}
	if p.active == nil {
		p.active = map[int]TermState{}
	}
	p.active[t] = st
	p.struck = true
	p.l.cfg.Metrics.marks.WithLabelValues(p.s.Terms[t].LabelString()).Inc()
	msg := fmt.Sprintf("term %d (%s) unavailable for %s: %s; %s", t+1, p.s.Terms[t].LabelString(),
		st.Until.Sub(p.now).Round(time.Second), reason, fallbackSummary(p.s.Place(p.rev.replicas, p.unavailable)))
	p.l.event(p.w, corev1.EventTypeWarning, ReasonTermUnavailable, msg)
	p.log.WithFields(logrus.Fields{"term": t + 1, "until": st.Until, "strikes": st.Strikes}).Warn(msg)
}

// unavailable reports whether term t is unavailable now.
func (p *revPass) unavailable(t int) bool {
	_, ok := p.active[t]
	return ok
}

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
