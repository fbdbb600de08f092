package converge

// Plan: what one revision's pass decides, from its snapshot, the clock and what the
// loop remembers, and nothing else: no client, no Events, no writes. act carries it out.

import (
	"fmt"
	"maps"
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
	// budget is misconfigured, nothing is evicted); unavailable is how many are now.
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
	p.planEvictions(snap, mem, cfg, mp.ready)
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
// last signal: a new mark for a term not unavailable (a strike: its seats go to the
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
		until := v.Last.Add(cfg.cooldown)
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

// movePlanner walks a revision's live pods and collects what should move.
type movePlanner struct {
	snap            *snapshot
	mem             *memory
	plan            *passPlan
	unavailable     map[int]bool
	live, ready     int
	heldSeats       []int
	above           map[int]clusterview.PlacedPod   // pods of seats above the replica count
	bySeat          map[int][]clusterview.PlacedPod // pods of each seat up to it
	landed, landing map[int]bool                    // terms a returning pod landed on, or is on its way to
	heldForFallback int
	moveSignalled   bool // planConfig.moveSignalled
}

// consider counts one live pod and adds its move, if it needs one: pods off their seat's
// term, unplaced pods, pods whose seat is above the replica count.
func (mp *movePlanner) consider(pod clusterview.PlacedPod) {
	if !pod.HoldsSeat() {
		return
	}
	mp.live++
	if pod.IsReady() && !mp.mem.wasEvicted(pod.UID) {
		mp.ready++
	}
	mp.noteReturn(pod)
	if !pod.Placed() {
		// A pod whose own nodeSelector contradicts a term was left unplaced on purpose;
		// its replacement would be too, so moving it would only churn.
		if !selectorConflicts(mp.snap.s, pod.NodeSelector()) {
			mp.plan.moves = append(mp.plan.moves, move{pod: pod, reason: MoveUnplaced, why: "it was admitted without a seat (the webhook was unreachable)"})
		}
		return
	}
	if pod.FallbackFrom > 0 {
		mp.plan.res.fallbackPods++
	}
	if pod.Seat > mp.snap.rev.replicas {
		mp.above[pod.Seat] = pod
		return
	}
	mp.heldSeats = append(mp.heldSeats, pod.Seat)
	if m, ok := mp.moveOff(pod); ok {
		mp.plan.moves = append(mp.plan.moves, m)
	} else if m, ok := mp.moveOffSignalledNode(pod); ok {
		mp.plan.moves = append(mp.plan.moves, m)
	}
}

// signalledNode says what EC2 said of the pod's node, if it is a signalled node of the
// pod's term t ("" otherwise), and when.
func (mp *movePlanner) signalledNode(pod clusterview.PlacedPod, t int) (string, time.Time) {
	if pod.NodeName == "" || t < 0 {
		return "", time.Time{}
	}
	at, kind, instance, ok := mp.snap.risk[t].Node(pod.NodeName)
	if !ok {
		return "", time.Time{}
	}
	return fmt.Sprintf("its node %s (instance %s) had an EC2 %s at %s", pod.NodeName, instance, kind, at.UTC().Format(time.RFC3339)), at
}

// moveOffSignalledNode returns, with Config.MoveSignalledNodes, the move of a pod on its
// seat's term whose node EC2 signalled, when the term is not at risk as a whole: only
// that node's pods move, their replacements placed on the same term. A pod created
// after the signal (a replacement the scheduler put on the node again) stays.
func (mp *movePlanner) moveOffSignalledNode(pod clusterview.PlacedPod) (move, bool) {
	if !mp.moveSignalled {
		return move{}, false
	}
	t := pod.TermIn(mp.snap.s)
	if t < 0 || mp.unavailable[t] {
		return move{}, false
	}
	why, at := mp.signalledNode(pod, t)
	if why == "" || !pod.Created.Before(at) {
		return move{}, false
	}
	return move{pod: pod, seat: pod.Seat, reason: MoveInterruption,
		why: why + "; moving it off the node (INTERRUPTION_MOVE_SIGNALLED_NODES=on), its seat stays on term " + fmt.Sprint(t+1)}, true
}

// moveOff returns the move of a pod holding a seat up to the replica count whose term
// is not its seat's, unless it had better stay for now.
func (mp *movePlanner) moveOff(pod clusterview.PlacedPod) (move, bool) {
	s, seat := mp.snap.s, pod.Seat
	want, have := mp.plan.placement.Terms[seat-1], pod.TermIn(s)
	if have == want {
		return move{}, false
	}
	haveGone := have >= 0 && mp.unavailable[have]
	signalled, _ := mp.signalledNode(pod, have)
	if haveGone && pod.NodeName != "" && signalled == "" {
		// The term's capacity is short, not gone: this pod has its node, so it stays.
		// Only the pods that cannot get one move (their replacements fall back), and
		// those on a node EC2 signalled: it is about to go.
		return move{}, false
	}
	if haveGone && (mp.snap.survey.waiting[want] != nil || mp.snap.survey.stranded[want] != nil) {
		// The fallback term's own pods wait for capacity too: sending more there only
		// adds to the wait. Move once they run.
		mp.heldForFallback++
		return move{}, false
	}
	m := move{pod: pod, seat: seat, reason: MoveDrift}
	switch {
	case haveGone && pod.NodeName != "":
		m.reason = MoveInterruption
		m.why = fmt.Sprintf("%s; term %d (%s) is unavailable; its seat %d goes to term %d (%s)", signalled, have+1, termLabels(s, have), seat, want+1, termLabels(s, want))
	case haveGone:
		m.reason = MoveStranded
		m.why = fmt.Sprintf("term %d (%s) is unavailable; its seat %d goes to term %d (%s)", have+1, termLabels(s, have), seat, want+1, termLabels(s, want))
	case pod.FallbackFrom == want+1:
		mp.termBack(want)
		m.reason = MoveReturn
		m.why = fmt.Sprintf("seat %d's own term %d (%s) is available again; moving it back from term %d", seat, want+1, termLabels(s, want), have+1)
	default:
		m.why = fmt.Sprintf("seat %d is on term %d (%s), the strategy places it on term %d (%s)", seat, have+1, termLabels(s, have), want+1, termLabels(s, want))
	}
	return m, true
}

// termBack says once per cool-down that a term is tried again.
func (mp *movePlanner) termBack(term int) {
	key := noteKey{revision: mp.snap.rev.uid, term: term, kind: noteTermBack}
	if mp.snap.rec != nil {
		key.until = mp.snap.rec.Terms[term].Until.UnixNano()
	}
	mp.plan.notes = append(mp.plan.notes, note{key: key, reason: ReasonTermBack,
		msg: fmt.Sprintf("term %d (%s) is tried again after its cool-down: moving its seats back from the fallback, a few pods at a time", term+1, termLabels(mp.snap.s, term))})
}

// moveSeatsAbove moves, one per seat free up to the replica count and once the revision
// has all its pods, the pods of the highest seats above the replica count, then the
// second pods of seats held twice (after an owner replica's crash the ledger can hand a
// seat out again, SPEC's convergence): each replacement takes a free seat.
func (mp *movePlanner) moveSeatsAbove() {
	n := mp.snap.rev.replicas
	if mp.live < n {
		return
	}
	holders := make([]uint8, n+1) // n is at most live: no bigger than the pods that exist
	twice := map[int]bool{}
	for _, seat := range mp.heldSeats {
		if holders[seat]++; holders[seat] > 1 {
			twice[seat] = true
		}
	}
	var free []int
	for seat := 1; seat <= n; seat++ {
		if holders[seat] == 0 {
			free = append(free, seat)
		}
	}
	seats := make([]int, 0, len(mp.above))
	for seat := range mp.above {
		seats = append(seats, seat)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(seats)))
	for i := 0; i < len(seats) && i < len(free); i++ {
		mp.plan.moves = append(mp.plan.moves, move{pod: mp.above[seats[i]], seat: seats[i], reason: MoveSeatAbove,
			why: fmt.Sprintf("seat %d is above the replica count %d while seat %d is free", seats[i], n, free[i])})
	}
	free = free[min(len(seats), len(free)):]
	if len(free) == 0 || len(twice) == 0 {
		return
	}
	for _, pod := range mp.secondHolders(twice) {
		if len(free) == 0 {
			return
		}
		mp.plan.moves = append(mp.plan.moves, move{pod: pod, seat: pod.Seat, reason: MoveSeatTwice,
			why: fmt.Sprintf("seat %d is held by another pod too while seat %d is free", pod.Seat, free[0])})
		free = free[1:]
	}
}

// secondHolders returns, for each of the seats twice (held by more than one pod), all
// its holders but the one that stays (Ready first, then the oldest), skipping pods that
// move for another reason; in seat order. Rare: the common pass pays nothing for it.
func (mp *movePlanner) secondHolders(twice map[int]bool) []clusterview.PlacedPod {
	moving := map[types.UID]bool{}
	for _, m := range mp.plan.moves {
		moving[m.pod.UID] = true
	}
	bySeat := map[int][]clusterview.PlacedPod{}
	for _, pod := range mp.snap.pods {
		if twice[pod.Seat] && pod.HoldsSeat() {
			bySeat[pod.Seat] = append(bySeat[pod.Seat], pod)
		}
	}
	var out []clusterview.PlacedPod
	for _, seat := range slices.Sorted(maps.Keys(bySeat)) {
		pods := bySeat[seat]
		slices.SortFunc(pods, func(a, b clusterview.PlacedPod) int {
			switch {
			case a.Ready != b.Ready:
				if a.Ready {
					return -1
				}
				return 1
			case !a.Created.Equal(b.Created):
				return a.Created.Compare(b.Created)
			}
			return strings.Compare(a.Name, b.Name)
		})
		for _, pod := range pods[1:] {
			if !moving[pod.UID] {
				out = append(out, pod)
			}
		}
	}
	return out
}

// noteReturn marks pod's term landed (a Ready pod created since the term's cool-down
// ended) or landing (one on its way), for canaryFirst.
func (mp *movePlanner) noteReturn(pod clusterview.PlacedPod) {
	t := pod.TermIn(mp.snap.s)
	if t < 0 {
		return
	}
	// Since when a pod counts as landed: the end of the term's cool-down, or, when the
	// record is gone, the last canary sent there. Creation times have whole seconds,
	// so a pod of the same second counts.
	var since time.Time
	if mp.snap.rec != nil {
		since = mp.snap.rec.Terms[t].Until
	}
	if since.IsZero() {
		since = mp.mem.returning[revisionTerm{mp.snap.rev.uid, t}]
	}
	if pod.Created.Before(since.Truncate(time.Second)) || !since.Before(mp.snap.now) {
		return
	}
	if pod.IsReady() {
		mp.landed[t] = true
	} else {
		mp.landing[t] = true
	}
}

// canaryFirst keeps, of the moves back to a term whose cool-down ended, only one until a
// pod has landed there (Ready, created since the cool-down ended): the term may still
// have no capacity, and a budget's worth of pods Pending for FALLBACK_AFTER at each
// cool-down's end is what a canary avoids. While the canary is on its way, none.
func (mp *movePlanner) canaryFirst() {
	snap, moves := mp.snap, mp.plan.moves
	termOf := func(m move) int { return m.pod.FallbackFrom - 1 }
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
		case m.reason != MoveReturn, mp.landed[t]:
			kept = append(kept, m)
		case mp.landing[t] || snap.now.Sub(mp.mem.returning[revisionTerm{snap.rev.uid, t}]) < returnGrace || m.seat != canary[t]:
			held++
		default:
			kept = append(kept, m)
		}
	}
	mp.plan.moves = kept
	terms := make([]int, 0, len(canary))
	for t := range canary {
		terms = append(terms, t)
	}
	sort.Ints(terms)
	for _, t := range terms {
		if !mp.landed[t] {
			mp.plan.notes = append(mp.plan.notes, note{key: noteKey{revision: snap.rev.uid, term: t, kind: noteCanary}, reason: ReasonTermBack,
				msg: fmt.Sprintf("term %d (%s): one pod goes back first; the other %d wait until it is Running and Ready there", t+1, termLabels(snap.s, t), held)})
		}
	}
}

// planEvictions orders the moves act may evict, pods without a node first (they run
// nowhere, so evicting them costs no availability), then the highest seats first, and
// says what each costs of the workload's budget. A pass that strikes a term, a workload
// that opted out, and moves of stranded pods with nowhere better to go evict nothing.
func (p *passPlan) planEvictions(snap *snapshot, mem *memory, cfg planConfig, ready int) {
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
	p.budget, p.unavailable = budget, max(0, snap.rev.replicas-ready)
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
