package converge

// Timing: when a revision's non-urgent moves may happen (its move window, the cap per
// opening, its minimum stay on fallback before a return). Moves that keep pods
// running are never held here.

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// What a move waits for: the indexes of result.waiting, and the values of the
// converge_waiting_pods metric's "for" label. The pace holds any move of a pod on a
// node (act.go); the others, non-urgent moves.
const (
	waitWindow = iota
	waitCap
	waitStay
	waitPace
	waitKinds
)

var waitNames = [waitKinds]string{"window", "window-cap", "min-fallback-stay", "pace"}

// urgent reports whether moves for reason protect availability: a pod with no seat, no
// node on an unavailable term, or a node EC2 signalled. No window holds them.
func urgent(reason string) bool {
	switch reason {
	case MoveUnplaced, MoveStranded, MoveInterruption:
		return true
	}
	return false
}

// revisionOpening names one opening of a revision's window (the cap counts per opening).
type revisionOpening struct {
	revision types.UID
	start    time.Time
}

// gate is the timing of one pass: what planEvictions asks of each non-urgent move.
type gate struct {
	t   strategy.Timing
	now time.Time
	// start is the current opening of the window (zero: closed, or no window); left is
	// how many moves the cap lets through in it (-1: no cap).
	start time.Time
	left  int
	// why says what the moves that wait, wait for (said as the pass's blocked message);
	// waiting counts them by what; until is when the earliest of them may go (zero:
	// not known, as for an invalid window).
	why     string
	waiting [waitKinds]int
	until   time.Time
}

// newGate reads snap's timing at snap.now: the window's opening and what the cap leaves
// of it (mem counts the moves made in it).
func newGate(snap *snapshot, mem *memory) *gate {
	g := &gate{t: snap.timing, now: snap.now, left: -1}
	if w := g.t.Window; w != nil && g.t.Err == nil {
		g.start, _ = w.Opening(snap.now)
		if w.MaxMoves > 0 && !g.start.IsZero() {
			g.left = max(0, w.MaxMoves-mem.windowMoves[revisionOpening{snap.rev.uid, g.start}])
		}
	}
	return g
}

// admit says whether non-urgent move m may go now; when it may not, it counts it and
// says why. A move it admits in a capped opening takes one of the opening's moves.
func (g *gate) admit(m *move) bool {
	if urgent(m.reason) {
		return true
	}
	w := g.t.Window
	switch {
	case g.t.Err != nil:
		g.wait(waitWindow, time.Time{}, g.t.Waits(g.now))
		return false
	case m.reason == MoveReturn && g.t.MinStay > 0 && g.now.Before(m.pod.Created.Add(g.t.MinStay)):
		g.wait(waitStay, m.pod.Created.Add(g.t.MinStay), fmt.Sprintf("returns wait for the minimum stay on fallback of %s (%s)", g.t.MinStay, strategy.SetBy(g.t.MinStaySource, "MIN_FALLBACK_STAY")))
		return false
	case w == nil:
		return true
	case g.start.IsZero():
		g.wait(waitWindow, w.NextOpen(g.now), g.t.Waits(g.now))
		return false
	case g.left == 0:
		_, end := w.Opening(g.now)
		next := w.NextOpen(end)
		g.wait(waitCap, next, fmt.Sprintf("moves wait for the next opening of window %q: its cap of %d moves is reached (%s; opens at %s)", w.String(), w.MaxMoves, strategy.SetBy(g.t.WindowSource, "MOVE_WINDOW"), next.UTC().Format(time.RFC3339)))
		return false
	case g.left > 0:
		g.left--
		m.opening = g.start
	}
	return true
}

// wait counts one move waiting for what, until when, and why.
func (g *gate) wait(what int, until time.Time, why string) {
	g.waiting[what]++
	if g.why == "" {
		g.why = why
	}
	if !until.IsZero() && (g.until.IsZero() || until.Before(g.until)) {
		g.until = until
	}
}
