package strategy

import (
	"fmt"
	"strings"
)

// State is how a workload's live pods stand against its strategy. Every reader (spread,
// plan --cluster, policy status, metrics) takes it from Judge, so "exact" means one
// thing everywhere.
type State string

// The states, from best to worst for a workload that carries a valid strategy.
const (
	// StateExact: every seat is on its own term, nothing is unplaced or unable to run.
	StateExact State = "exact"
	// StateFallback: the pods stand where the placement wants them now, but some seats
	// are held on a fallback term (their own term is unavailable), or a term that should
	// hold pods is served by no capacity at all (most often a typo in a label).
	StateFallback State = "fallback"
	// StateOffTarget: pods are not where the placement wants them: unplaced, on
	// another term, missing or above the replica count, or unable to run their images.
	StateOffTarget State = "off-target"
)

// Tally is what a reader counted of one workload revision's live pods.
type Tally struct {
	Replicas int
	// Placed counts the pods that hold a seat, per 0-based term they are on.
	Placed []int
	// Unplaced counts live pods without a seat or on no term of the strategy; CannotRun
	// the placed ones whose term offers no architecture their images support.
	Unplaced, CannotRun int
}

// NewTally is an empty tally of a revision of replicas pods over terms terms.
func NewTally(replicas, terms int) Tally {
	return Tally{Replicas: replicas, Placed: make([]int, terms)}
}

// LivePod is what a tally reads of one live pod of a revision (one that holds a seat:
// not terminating, not finished). Every reader converts its own pod type to it and
// counts with Tally.Add, so spread, the convergence loop and policy status count alike.
type LivePod struct {
	// Seat is the pod's seat, 1-based (0: none, the pod is unplaced).
	Seat int
	// Term is the 0-based term of the strategy the pod stands on (-1: none).
	Term int
	// CannotRun: admission found that its term offers no architecture its images
	// support (AnnotationCannotRun).
	CannotRun bool
}

// Add counts p: without a seat, or on no term of the strategy, it is unplaced (the loop
// moves it either way); otherwise placed on its term, and counted again when it cannot
// run there.
func (t *Tally) Add(p LivePod) {
	if p.Seat <= 0 || p.Term < 0 || p.Term >= len(t.Placed) {
		t.Unplaced++
		return
	}
	t.Placed[p.Term]++
	if p.CannotRun {
		t.CannotRun++
	}
}

// Conditions is what a reader knows of the terms beside the pods: nil functions mean
// "not known" (treated as available and served).
type Conditions struct {
	// Unavailable reports whether a term is unavailable now (its seats go to the
	// fallback), and why.
	Unavailable func(term int) (why string, unavailable bool)
	// Unserved reports whether no NodePool, node group or node serves a term, and what
	// is likely wrong with its labels ("": nothing to add).
	Unserved func(term int) (hint string, unserved bool)
}

// Verdict is Judge's answer: the state and, when it is not exact, why, in words a user
// acts on.
type Verdict struct {
	State State
	Why   string
}

// Exact reports whether the verdict is StateExact.
func (v Verdict) Exact() bool { return v.State == StateExact }

// Judge decides the state of a workload revision of s whose live pods are t.
func Judge(s *Strategy, t Tally, c Conditions) Verdict {
	if t.Unplaced > 0 {
		return Verdict{StateOffTarget, fmt.Sprintf("%d pods carry no seat on a term of the strategy (admitted while the webhook was not asked or unreachable, or placed under an earlier strategy)", t.Unplaced)}
	}
	if t.CannotRun > 0 {
		return Verdict{StateOffTarget, fmt.Sprintf("%d pods are on a term that cannot run their images", t.CannotRun)}
	}
	target := s.Target(t.Replicas)
	var unserved []string
	for i, want := range target {
		if want == 0 || c.Unserved == nil {
			continue
		}
		if hint, u := c.Unserved(i); u {
			unserved = append(unserved, UnservedReason(i, s.Terms[i], hint))
		}
	}
	placedOn := func(i int) int {
		if i < len(t.Placed) {
			return t.Placed[i]
		}
		return 0
	}
	if equalCounts(target, placedOn) {
		if len(unserved) > 0 {
			return Verdict{StateFallback, strings.Join(unserved, "; ")}
		}
		return Verdict{State: StateExact}
	}
	var reasons []string
	unavailable := func(i int) bool { return false }
	if c.Unavailable != nil {
		unavailable = func(i int) bool { _, u := c.Unavailable(i); return u }
		for i := range s.Terms {
			if why, u := c.Unavailable(i); u {
				reasons = append(reasons, fmt.Sprintf("term %d (%s) is unavailable: %s", i+1, s.Terms[i].LabelString(), why))
			}
		}
	}
	expected := s.Place(t.Replicas, unavailable).Counts(len(s.Terms))
	if len(reasons) > 0 && equalCounts(expected, placedOn) {
		return Verdict{StateFallback, strings.Join(append(reasons, unserved...), "; ")}
	}
	for i, want := range expected {
		if got := placedOn(i); got != want {
			return Verdict{StateOffTarget, fmt.Sprintf("term %d (%s) holds %d pods, expected %d", i+1, s.Terms[i].LabelString(), got, want)}
		}
	}
	return Verdict{StateOffTarget, "the pods are not on their terms"}
}

// UnservedReason says that term (0-based index i) is served by nothing, with what is
// likely wrong with its labels (hint; "": nothing to add).
func UnservedReason(i int, t Term, hint string) string {
	msg := fmt.Sprintf("term %d (%s) is served by no NodePool, node group or node", i+1, t.LabelString())
	if hint != "" {
		msg += ": " + hint
	}
	return msg
}

// equalCounts reports whether want[i] == got(i) for every term.
func equalCounts(want []int, got func(int) int) bool {
	for i, w := range want {
		if got(i) != w {
			return false
		}
	}
	return true
}
