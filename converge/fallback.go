package converge

// Fallback: where the seats go while terms are unavailable, and the return to a term
// once its cool-down ends (one canary first).

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// place computes where each seat up to the replica count goes with the unavailable
// terms left out, reports the targets and placed pods per term, and says once when no
// term is left to fall back on.
func (p *revPass) place() {
	p.placement = p.s.Place(p.rev.replicas, p.unavailable)
	p.res.target, p.res.placed = map[string]int{}, map[string]int{}
	for t, c := range p.placement.Counts(len(p.s.Terms)) {
		p.res.target[p.s.Terms[t].LabelString()] += c
		p.res.placed[p.s.Terms[t].LabelString()] += p.placedOn[t]
	}
	uid := p.rev.uid
	if !p.placement.Stuck {
		delete(p.l.stuckSaid, uid)
		return
	}
	if !p.l.stuckSaid[uid] {
		p.l.stuckSaid[uid] = true
		msg := "no term with a weight or a base is available: pods stay where they are until one is back (" + unavailableList(p.s, p.active) + ")"
		p.l.event(p.w, corev1.EventTypeWarning, ReasonNoFallback, msg)
		p.log.Warn(msg)
	}
}

// noteReturn marks pod's term landed (a Ready pod created since the term's cool-down
// ended) or landing (one on its way), for canaryFirst.
func (p *revPass) noteReturn(pod *corev1.Pod) {
	t := strategy.TermOf(p.s, pod)
	if t < 0 {
		return
	}
	// Since when a pod counts as landed: the end of the term's cool-down, or, when the
	// record is gone, the last canary sent there. Creation times have whole seconds,
	// so a pod of the same second counts.
	var since time.Time
	if p.rec != nil {
		since = p.rec.Terms[t].Until
	}
	if since.IsZero() {
		since = p.l.returning[uidTerm(p.rev.uid, t)]
	}
	if pod.CreationTimestamp.Time.Before(since.Truncate(time.Second)) || !since.Before(p.now) {
		return
	}
	if isReady(pod) {
		p.landed[t] = true
	} else {
		p.landing[t] = true
	}
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
