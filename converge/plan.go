package converge

// Plan: what one revision's pass decides, from its snapshot, the clock and what the
// loop remembers, and nothing else: no client, no Events, no writes. act carries it out.

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/interruption"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// Reasons for a move, the values of the evictions metric's "reason" label.
const (
	MoveStranded  = "stranded"
	MoveReturn    = "return"
	MoveDrift     = "drift"
	MoveUnplaced  = "unplaced"
	MoveSeatAbove = "seat-above-replicas"
	MoveSeatTwice = "seat-held-twice"
	// MoveInterruption: the pod runs on a node EC2 signalled (interruption warning,
	// rebalance recommendation, state change) of a term at risk, or of any term with
	// Config.MoveSignalledNodes.
	MoveInterruption = "interruption"
)

// returnGrace is how long a canary's eviction counts as on its way before its
// replacement shows up as a pod (the ReplicaSet controller recreates it in moments).
const returnGrace = 30 * time.Second

// planConfig is what plan reads of the loop's configuration.
type planConfig struct {
	fallbackAfter  time.Duration
	maxUnavailable intstr.IntOrString
	// cooldown (FALLBACK_COOLDOWN): a term at risk stays marked this long after its
	// last signal.
	cooldown time.Duration
	// moveSignalled: Config.MoveSignalledNodes.
	moveSignalled bool
}

// passPlan is what a pass decided for one revision.
type passPlan struct {
	// strikes are the terms found without capacity, or at risk: records to write. A
	// pass that strikes moves nothing (every replica must see the record before the
	// evicted pods' replacements are admitted, or they would strand again).
	strikes []strike
	// extends are marks at risk already in the record that more signals make last
	// longer: written, but no reason to hold the moves.
	extends []strike
	// notes are said once each (Events and log lines with typed keys).
	notes []note
	// placement places seats 1..replicas with the unavailable and struck terms left out.
	placement strategy.Placement
	// moves are the pods off their placement, the canary rule applied: what is left to
	// do. evict is what act may evict now, in order, within budget.
	moves, evict []move
	// budget is how many pods may be unavailable at once (0 during a rollout; -1: the
	// budget is misconfigured, nothing is evicted); unavailable is how many are now
	// (fewer than replicas Ready, the pods the loop evicted not counted Ready).
	budget, unavailable int
	// blocked says why moves wait when nothing in act says more ("" none).
	blocked string
	// holds are the reasons whose moved pods came back in the same state: act holds
	// their moves (the repeat guard, memory.go). held counts the moves held now, and
	// heldUntil is when the earliest hold ends.
	holds     []string
	held      int
	heldUntil time.Time
	// stuck: no term with a weight or a base is left to fall back on (said once).
	stuck string
	res   result
}

// strike is a term to record unavailable, and why.
type strike struct {
	term   int
	reason string
	// pending: the term's pods that wait for a node, among which Karpenter's
	// nominations are counted for the reason.
	pending map[types.UID]bool
	// risk is set for a term at risk on EC2's signals, marked until until.
	risk  *interruption.Verdict
	until time.Time
}

// move is one pod the loop wants elsewhere.
type move struct {
	pod    clusterview.PlacedPod
	seat   int
	reason string
	why    string
	// room is 1 for a pod with a node: evicting it needs room in the budget, Ready or
	// not (a pod that is Running but not Ready may be about to serve); cost is 1 when it
	// is Ready, one more pod unavailable once it goes.
	room, cost int
	// opening is the opening of the revision's window whose cap this move counts
	// against (zero: none).
	opening time.Time
}

// plan decides one revision's pass from snap, the loop's memory (read only) and now
// (snap.now).
func plan(snap *snapshot, mem *memory, cfg planConfig) *passPlan {
	p := &passPlan{}
	unavailable := map[int]bool{}
	for t := range snap.active {
		unavailable[t] = true
	}
	for t := range snap.s.Terms {
		if unavailable[t] {
			continue
		}
		if reason, launching := unavailableBecause(snap, t, cfg); reason != "" {
			p.strikes = append(p.strikes, strike{term: t, reason: reason, pending: pendingOn(snap, t)})
			unavailable[t] = true
		} else if launching != nil {
			p.notes = append(p.notes, *launching)
		}
	}
	p.markAtRisk(snap, cfg, unavailable)
	p.placement = snap.s.Place(snap.rev.replicas, func(t int) bool { return unavailable[t] })
	p.place(snap)
	p.noteSignals(snap)
	mp := movePlanner{snap: snap, mem: mem, plan: p, unavailable: unavailable, moveSignalled: cfg.moveSignalled,
		above: map[int]clusterview.PlacedPod{}, landed: map[int]bool{}, landing: map[int]bool{}}
	for _, pod := range snap.pods {
		mp.consider(pod)
	}
	for _, pod := range snap.unplaced {
		mp.consider(pod)
	}
	mp.moveSeatsAbove()
	mp.canaryFirst()
	if mp.heldForFallback > 0 {
		p.blocked = fmt.Sprintf("%d stranded pods wait to move: their fallback term's own pods wait for capacity too", mp.heldForFallback)
	}
	p.res.off = len(p.moves) > 0 || len(snap.survey.stranded) > 0
	p.unavailable = max(0, snap.rev.replicas-mp.ready)
	p.planEvictions(snap, mem, cfg)
	return p
}

// unavailableBecause says why term t has no capacity, "" when it may have: its pods
// are stranded and Karpenter either says it cannot launch for them or launches nothing,
// or they wait and Karpenter already says it cannot. Stranded pods that Karpenter is
// launching capacity for give a note instead.
func unavailableBecause(snap *snapshot, t int, cfg planConfig) (string, *note) {
	sig := snap.signals[t]
	if g := snap.survey.stranded[t]; g != nil {
		reason := fmt.Sprintf("%d pods unschedulable for %s", g.count, g.age(snap.now))
		switch {
		case sig.word != "":
			return reason + ", " + sig.word, nil
		case sig.flight != nil:
			// Time alone: only once Karpenter has stopped bringing capacity for the term.
			f := *sig.flight
			if f.Progressing(snap.now, cfg.fallbackAfter) {
				s := snap.s
				return "", &note{
					key:    noteKey{revision: snap.rev.uid, term: t, kind: noteLaunching, launching: f.Launching},
					metric: s.Terms[t].LabelString(),
					fields: logrus.Fields{"term": t + 1, "launching": f.Launching, "registered": f.Registered},
					msg: fmt.Sprintf("term %d (%s): %d pods unschedulable for %s, not unavailable: Karpenter is launching capacity for it (%s)",
						t+1, s.Terms[t].LabelString(), g.count, g.age(snap.now), f),
				}
			}
			return reason + ", and Karpenter is launching nothing for the term (" + f.String() + ")", nil
		}
		return reason, nil
	}
	// A word is there only when Karpenter's word is read (Config.Signals, observe).
	if g := snap.survey.waiting[t]; g != nil && sig.word != "" {
		return fmt.Sprintf("%d pods unschedulable for %s, %s", g.count, g.age(snap.now), sig.word), nil
	}
	return "", nil
}

// markAtRisk marks the terms EC2's signals put at risk, until a cool-down after their
// last signal (after the end of a Capacity Block whose end was announced): a new mark for a term not unavailable (a strike: its seats go to the
// fallback), a longer one for a term already marked when its record would end before
// that. A longer mark is written with a tenth of the cool-down to spare, so a stream of
// signals writes each record at most every tenth of the cool-down; the term returns
// after between one and 1.1 cool-downs of quiet. Signals older than the window, and
// those of other terms' nodes, are not in the verdict.
func (p *passPlan) markAtRisk(snap *snapshot, cfg planConfig, unavailable map[int]bool) {
	for t := range snap.s.Terms {
		v, ok := snap.risk[t]
		if !ok || !v.AtRisk {
			continue
		}
		quiet := v.Last
		if v.Ends.After(quiet) {
			// A Capacity Block's end: the term stays marked until its nodes are gone,
			// so no seat goes back onto the ending reservation.
			quiet = v.Ends
		}
		until := quiet.Add(cfg.cooldown)
		if !until.After(snap.now) {
			continue // quiet for the cool-down already
		}
		st := strike{term: t, reason: "at risk: " + v.Evidence(), risk: &v, until: until}
		switch active, on := snap.active[t]; {
		case on && !until.After(active.Until):
		case on:
			st.until = until.Add(cfg.cooldown / 10)
			p.extends = append(p.extends, st)
		case unavailable[t]:
			// Struck in this pass for want of capacity: that record says enough.
		default:
			p.strikes = append(p.strikes, st)
			unavailable[t] = true
		}
	}
}

// noteSignals says once per signal, on the workload, which of its pods run on a node EC2
// signalled.
func (p *passPlan) noteSignals(snap *snapshot) {
	if len(snap.risk) == 0 {
		return
	}
	type onNode struct {
		term  int
		node  string
		count int
	}
	byNode := map[string]*onNode{}
	for _, pod := range snap.pods {
		t := pod.TermIn(snap.s)
		if !pod.HoldsSeat() || pod.NodeName == "" || t < 0 {
			continue
		}
		if _, _, _, ok := snap.risk[t].Node(pod.NodeName); !ok {
			continue
		}
		if byNode[pod.NodeName] == nil {
			byNode[pod.NodeName] = &onNode{term: t, node: pod.NodeName}
		}
		byNode[pod.NodeName].count++
	}
	nodes := make([]string, 0, len(byNode))
	for n := range byNode {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, name := range nodes {
		n := byNode[name]
		at, kind, instance, _ := snap.risk[n.term].Node(name)
		p.notes = append(p.notes, note{
			key:    noteKey{revision: snap.rev.uid, term: n.term, kind: noteSignal, node: name, until: at.UnixNano()},
			reason: ReasonInterruptionSignal,
			fields: logrus.Fields{"node": name, "instance": instance, "signal": kind, "term": n.term + 1},
			msg: fmt.Sprintf("EC2 %s at %s for node %s (instance %s) of term %d (%s): %d of this workload's pods run there",
				kind, at.UTC().Format(time.RFC3339), name, instance, n.term+1, termLabels(snap.s, n.term), n.count),
		})
	}
}

// pendingOn collects the UIDs of the revision's placed pods on term that wait for a node.
func pendingOn(snap *snapshot, term int) map[types.UID]bool {
	out := map[types.UID]bool{}
	for _, p := range snap.pods {
		if isUnschedulable(p) && p.TermIn(snap.s) == term {
			out[p.UID] = true
		}
	}
	return out
}

// place reports the targets and placed pods per term, and what to say when no term is
// left to fall back on.
func (p *passPlan) place(snap *snapshot) {
	s := snap.s
	p.res.target, p.res.placed = map[termSource]int{}, map[termSource]int{}
	for t, c := range p.placement.Counts(len(s.Terms)) {
		k := termSource{s.Terms[t].LabelString(), snap.origin}
		p.res.target[k] += c
		p.res.placed[k] += snap.survey.placedOn[t]
	}
	if p.placement.Stuck {
		p.stuck = "no term with a weight or a base is available: pods stay where they are until one is back (" + unavailableList(snap) + ")"
	}
}

// planEvictions orders the moves act may evict, pods without a node first (they run
// nowhere, so evicting them costs no availability), then the highest seats first, and
// says what each costs of the workload's budget. A pass that strikes a term, a workload
// that opted out, and moves of stranded pods with nowhere better to go evict nothing.
func (p *passPlan) planEvictions(snap *snapshot, mem *memory, cfg planConfig) {
	switch {
	case len(p.strikes) > 0, len(p.moves) == 0:
		return
	case snap.hold != "":
		p.blocked = fmt.Sprintf("%d pods off their placement; not moved: %s", len(p.moves), snap.hold)
		return
	}
	budget, err := Budget(cfg.maxUnavailable, snap.rev.replicas)
	switch {
	case err != nil:
		budget = -1
	case snap.rev.rolling:
		budget = 0
	}
	p.budget = budget
	for _, m := range p.moves {
		// Nowhere better to go: moving would only recreate them where they are.
		if (p.placement.Stuck && m.reason == MoveStranded) || mem.wasEvicted(m.pod.UID) {
			continue
		}
		if held, again := mem.repeatOf(snap.rev.uid, m, snap.now); held || again {
			p.held++
			if again && !slices.Contains(p.holds, m.reason) {
				p.holds = append(p.holds, m.reason)
			}
			if r := mem.repeats[revisionReason{snap.rev.uid, m.reason}]; held && (p.heldUntil.IsZero() || r.until.Before(p.heldUntil)) {
				p.heldUntil = r.until
			}
			continue
		}
		if m.pod.NodeName != "" {
			m.room = 1
			if m.pod.IsReady() {
				m.cost = 1
			}
		}
		p.evict = append(p.evict, m)
	}
	sort.SliceStable(p.evict, func(i, j int) bool {
		ui, uj := p.evict[i].pod.NodeName == "", p.evict[j].pod.NodeName == ""
		if ui != uj {
			return ui
		}
		return p.evict[i].seat > p.evict[j].seat
	})
	// The window's gate last, in that order: the cap lets the first moves through.
	g := newGate(snap, mem)
	kept := p.evict[:0]
	for _, m := range p.evict {
		if g.admit(&m) {
			kept = append(kept, m)
		}
	}
	p.evict = kept
	p.waitFor(g)
}

// waitFor counts the moves g held among the pass's held ones (the pass after is due when
// the earliest may go) and says why they wait, unless something else says more.
func (p *passPlan) waitFor(g *gate) {
	n := 0
	for _, c := range g.waiting {
		n += c
	}
	if n == 0 {
		return
	}
	p.res.waiting = g.waiting
	p.held += n
	if !g.until.IsZero() && (p.heldUntil.IsZero() || g.until.Before(p.heldUntil)) {
		p.heldUntil = g.until
	}
	if p.blocked == "" {
		p.blocked = fmt.Sprintf("%d pods wait to move: %s", n, g.why)
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

// unavailableList names the revision's unavailable terms, until when and why.
func unavailableList(snap *snapshot) string {
	terms := make([]int, 0, len(snap.active))
	for t := range snap.active {
		terms = append(terms, t)
	}
	sort.Ints(terms)
	parts := make([]string, len(terms))
	for i, t := range terms {
		st := snap.active[t]
		parts[i] = fmt.Sprintf("term %d (%s) until %s: %s", t+1, termLabels(snap.s, t), st.Until.UTC().Format(time.RFC3339), st.Reason)
	}
	return strings.Join(parts, "; ")
}

func termLabels(s *strategy.Strategy, t int) string {
	if t < 0 || t >= len(s.Terms) {
		return "?"
	}
	return s.Terms[t].LabelString()
}
