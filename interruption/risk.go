package interruption

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Defaults of the rule (docs/interruption-signals.md says why).
const (
	// DefaultWindow: a wave of rebalance recommendations over one capacity pool comes
	// within minutes, and AWS sends them minutes to hours before interruptions (often
	// none follow); signals older than ten minutes say little about the pool now.
	DefaultWindow = 10 * time.Minute
	// DefaultSharePercent: half the term's nodes signalled is a pool under pressure,
	// not one unlucky instance.
	DefaultSharePercent = 50
	// DefaultMinNodes: one node's signal is never a term at risk, however small the
	// term (that is what the per-node option is for).
	DefaultMinNodes = 2
)

// Settings are the interruption signals' knobs a user turns (INTERRUPTION_QUEUE and
// the rule's INTERRUPTION_* settings): serve reads them and hands them over.
type Settings struct {
	// Queue is the SQS queue of EC2 signals, a URL or a name ("": off).
	Queue string
	// Rule says when a term is at risk.
	Rule Rule
}

// Rule says when a term is at risk: when at least MinNodes of its nodes, and at least
// SharePercent of them, had a signal within Window.
type Rule struct {
	Window       time.Duration
	SharePercent int
	MinNodes     int
}

// String describes the rule, for the start-up log line.
func (r Rule) String() string {
	return fmt.Sprintf("at risk when %d%% of a term's nodes, and at least %d, had a signal within %s", r.SharePercent, r.MinNodes, r.Window)
}

// DefaultRule is the rule with its documented defaults.
func DefaultRule() Rule {
	return Rule{Window: DefaultWindow, SharePercent: DefaultSharePercent, MinNodes: DefaultMinNodes}
}

// Validate says what is wrong with the rule ("" when nothing), naming the settings.
func (r Rule) Validate() error {
	switch {
	case r.Window <= 0:
		return fmt.Errorf("INTERRUPTION_WINDOW %s: want a positive duration", r.Window)
	case r.SharePercent < 1 || r.SharePercent > 100:
		return fmt.Errorf("INTERRUPTION_RISK_SHARE %d%%: want 1%% to 100%%", r.SharePercent)
	case r.MinNodes < 1:
		return fmt.Errorf("INTERRUPTION_RISK_MIN_NODES %d: want at least 1", r.MinNodes)
	}
	return nil
}

// NodeSignals is what one node was told: its instance and, per kind, the latest time
// EC2 said it (only the kinds that count; see Signal.Counts).
type NodeSignals struct {
	Instance string
	At       map[Kind]time.Time
	// Ends is the end of the Capacity Block the node is on, when its end was announced
	// (KindCapacityBlockEnd): that signal holds until then, whatever the window, as the
	// node goes with the block.
	Ends time.Time
}

// Latest is the latest of the node's signals that hold at now (within the window ending
// at now; a Capacity Block's until its end), and its kind; ok is false when none does.
func (n NodeSignals) Latest(now time.Time, window time.Duration) (time.Time, Kind, bool) {
	var (
		latest time.Time
		kind   Kind
	)
	for _, k := range Kinds {
		at, ok := n.At[k]
		if ok && n.holds(k, at, now, window) && at.After(latest) {
			latest, kind = at, k
		}
	}
	return latest, kind, !latest.IsZero()
}

// holds reports whether the node's signal of kind k, at at, still counts at now.
func (n NodeSignals) holds(k Kind, at, now time.Time, window time.Duration) bool {
	if k == KindCapacityBlockEnd {
		return !at.After(now) && now.Before(n.Ends)
	}
	return within(at, now, window)
}

// within reports whether at is in the window (now-window, now].
func within(at, now time.Time, window time.Duration) bool {
	return !at.After(now) && now.Sub(at) < window
}

// Verdict is the rule's answer for one term at one time.
type Verdict struct {
	// Nodes counts the term's nodes.
	Nodes int
	// Signalled holds the term's nodes with a signal within the window, by name.
	Signalled map[string]NodeSignals
	// ByKind counts the signalled nodes with each kind within the window.
	ByKind map[Kind]int
	// Last is the latest signal within the window (zero: none).
	Last time.Time
	// Ends is the latest end of a Capacity Block among the signalled nodes (zero: none):
	// the term's signals are not quiet before it.
	Ends   time.Time
	AtRisk bool
	rule   Rule
	now    time.Time
}

// Assess applies the rule to a term whose nodes are termNodes (names), given the
// signals per node name, at now. Signals of nodes that are not the term's, and those
// outside the window, are not looked at.
func (r Rule) Assess(termNodes []string, signals map[string]NodeSignals, now time.Time) Verdict {
	v := Verdict{Nodes: len(termNodes), rule: r, now: now}
	for _, name := range termNodes {
		ns, ok := signals[name]
		if !ok {
			continue
		}
		last, _, ok := ns.Latest(now, r.Window)
		if !ok {
			continue
		}
		if v.Signalled == nil {
			v.Signalled, v.ByKind = map[string]NodeSignals{}, map[Kind]int{}
		}
		v.Signalled[name] = NodeSignals{Instance: ns.Instance, At: maps.Clone(ns.At), Ends: ns.Ends}
		for k, at := range ns.At {
			if ns.holds(k, at, now, r.Window) {
				v.ByKind[k]++
			}
		}
		if last.After(v.Last) {
			v.Last = last
		}
		if v.ByKind[KindCapacityBlockEnd] > 0 && ns.Ends.After(v.Ends) {
			v.Ends = ns.Ends
		}
	}
	n := len(v.Signalled)
	// A Capacity Block's end is a date, not a risk: one node of it is enough.
	v.AtRisk = (n >= r.MinNodes && n*100 >= r.SharePercent*v.Nodes) || v.ByKind[KindCapacityBlockEnd] > 0
	return v
}

// Evidence says what the verdict rests on, for the record and the Event: "rebalance
// recommendations or interruption warnings for 7 of 10 nodes within 10m0s (rule: 50%,
// at least 2): 7 rebalance-recommendation, 1 interruption-warning; last at ...;
// instances i-1, i-2, ...".
func (v Verdict) Evidence() string {
	var kinds []string
	for _, k := range Kinds {
		if n := v.ByKind[k]; n > 0 {
			kinds = append(kinds, fmt.Sprintf("%d %s", n, k))
		}
	}
	// A block's end marks the term on one node, whatever the rule: say that first.
	rule := fmt.Sprintf("rule: %d%%, at least %d", v.rule.SharePercent, v.rule.MinNodes)
	lead := ""
	if !v.Ends.IsZero() {
		lead = "a Capacity Block ends at " + v.Ends.UTC().Format(time.RFC3339) + "; "
		rule = "one node of a block is enough"
	}
	return fmt.Sprintf("%sEC2 signals for %d of the term's %d nodes within %s (%s): %s; last at %s; instances %s",
		lead, len(v.Signalled), v.Nodes, v.rule.Window, rule, strings.Join(kinds, ", "),
		v.Last.UTC().Format(time.RFC3339), strings.Join(v.Instances(8), ", "))
}

// Instances lists up to max of the signalled nodes' instances, sorted, with "+N more"
// for the rest.
func (v Verdict) Instances(max int) []string {
	ids := make([]string, 0, len(v.Signalled))
	for _, ns := range v.Signalled {
		ids = append(ids, ns.Instance)
	}
	slices.Sort(ids)
	if len(ids) > max {
		ids = append(ids[:max], fmt.Sprintf("+%d more", len(v.Signalled)-max))
	}
	return ids
}

// Window is the rule's window the verdict counted signals in.
func (v Verdict) Window() time.Duration { return v.rule.Window }

// Node returns the latest signal of the term's node name within the window, its kind
// and instance; ok is false when it had none (or is not the term's).
func (v Verdict) Node(name string) (at time.Time, kind Kind, instance string, ok bool) {
	ns, found := v.Signalled[name]
	if !found {
		return time.Time{}, "", "", false
	}
	at, kind, ok = ns.Latest(v.now, v.rule.Window)
	return at, kind, ns.Instance, ok
}
