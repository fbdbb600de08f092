package converge

import (
	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/types"
)

// Event reasons the loop records on workloads.
const (
	ReasonTermUnavailable = "TermUnavailable"
	ReasonNoFallback      = "NoFallbackTerm"
	ReasonConverge        = "Converge"
	ReasonConvergeBlocked = "ConvergeBlocked"
	// ReasonConvergeHeld: the pods moved for a reason came back in the same state, so
	// the loop holds such moves of the workload for a while (the repeat guard).
	ReasonConvergeHeld = "ConvergeHeld"
	ReasonTermBack     = "TermAvailable"
	// ReasonTermAtRisk: a term marked at risk on EC2's interruption signals.
	ReasonTermAtRisk = "TermAtRisk"
	// ReasonInterruptionSignal: pods of the workload run on a node EC2 signalled.
	ReasonInterruptionSignal = "InterruptionSignal"
)

// noteKind is what a note is about.
type noteKind uint8

const (
	noteTermBack  noteKind = iota + 1 // a term is tried again after its cool-down
	noteCanary                        // one pod goes back to a term first
	noteLaunching                     // pods wait, yet their term is not unavailable: Karpenter launches for it
	noteSignal                        // pods run on a node EC2 signalled
	notePinned                        // a pod that would move carries do-not-disrupt
)

// noteKey names a note said once: its revision, term and kind, and what makes it new
// (the end of the cool-down a term returns from, the NodeClaims in flight).
type noteKey struct {
	revision  types.UID
	term      int
	kind      noteKind
	until     int64 // Unix nanoseconds (a signal's time, for noteSignal)
	launching int
	node      string    // the signalled node (noteSignal)
	pod       types.UID // the pod that stays (notePinned)
}

// note is a line plan wants said once per key: an Event on the workload (and a log
// line), or a log line alone when it has no reason.
type note struct {
	key    noteKey
	reason string // the Event's reason; "": a log line only
	msg    string
	// metric: the term's labels, for the launch-waits counter (launching notes).
	metric string
	fields logrus.Fields
}
