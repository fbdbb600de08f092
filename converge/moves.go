package converge

// Which of a revision's pods move, and why: the move planner walks its live pods
// (pods off their seat's term, unplaced pods, seats above the replica count or held
// twice, returns with a canary first).

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// movePlanner walks a revision's live pods and collects what should move.
type movePlanner struct {
	snap            *snapshot
	mem             *memory
	plan            *passPlan
	unavailable     map[int]bool
	live, ready     int
	heldSeats       []int
	above           map[int]clusterview.PlacedPod // pods of seats above the replica count
	landed, landing map[int]bool                  // terms a returning pod landed on, or is on its way to
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
			mp.add(move{pod: pod, reason: MoveUnplaced, why: "it was admitted without a seat (the webhook was unreachable)"})
		}
		return
	}
	if pod.FallbackFrom > 0 {
		mp.plan.res.fallbackPods++
	}
	if pod.Seat > mp.snap.rev.replicas {
		if !pod.DoNotDisrupt {
			mp.above[pod.Seat] = pod
		}
		return
	}
	mp.heldSeats = append(mp.heldSeats, pod.Seat)
	if m, ok := mp.moveOff(pod); ok {
		mp.add(m)
	} else if m, ok := mp.moveOffSignalledNode(pod); ok {
		mp.add(m)
	}
}

// add plans m, unless its pod carries Karpenter's do-not-disrupt: such a pod is never
// evicted by the loop (Karpenter keeps it through voluntary disruption too); it stays
// where it is, holding its seat there, and the workload is told once. Nor does it keep
// the revision off its placement (the lag, its alert): that is the user's choice.
func (mp *movePlanner) add(m move) {
	if !m.pod.DoNotDisrupt {
		mp.plan.moves = append(mp.plan.moves, m)
		return
	}
	mp.plan.notes = append(mp.plan.notes, note{key: noteKey{revision: mp.snap.rev.uid, kind: notePinned, pod: m.pod.UID}, reason: ReasonConvergeBlocked,
		msg: fmt.Sprintf("pod %s stays where it is (%s=true), though %s", m.pod.Name, karpv1.DoNotDisruptAnnotationKey, m.why)})
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
	if haveGone && (pod.NodeName != "" || mp.snap.nominated[pod.UID]) && signalled == "" {
		// The term's capacity is short, not gone: this pod has its node, or Karpenter
		// is bringing one for it, so it stays. Only the pods that cannot get one move
		// (their replacements fall back), and those on a node EC2 signalled: it is
		// about to go.
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
// its holders but the one that stays (do-not-disrupt first, then Ready, then the
// oldest), skipping pods that move for another reason or must not be evicted; in seat
// order. Rare: the common pass pays nothing for it.
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
			case a.DoNotDisrupt != b.DoNotDisrupt:
				// The one that stays: never a pod the loop must not evict.
				if a.DoNotDisrupt {
					return -1
				}
				return 1
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
			if !moving[pod.UID] && !pod.DoNotDisrupt {
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

// selectorConflicts reports whether sel sets a key of some term to another value. A set
// (the pod's own required node affinity) is not a conflict, as admission merges the
// term into it.
func selectorConflicts(s *strategy.Strategy, sel map[string]string) bool {
	for _, t := range s.Terms {
		for _, l := range t.Labels {
			if v, ok := sel[l.Key]; ok && !strings.Contains(v, strategy.SetSeparator) && !l.Admits(v) {
				return true
			}
		}
	}
	return false
}
