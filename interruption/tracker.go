package interruption

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// Origin is the account and region a queue's events must come from ("": any).
type Origin struct {
	Account, Region string
}

// Outcome is what handling one message came to.
type Outcome struct {
	// Result is the messages metric's label (resultSignal, ...).
	Result string
	// Retry: the message could not be judged yet (the node view has not synced); it is
	// left in the queue to come back after its visibility timeout.
	Retry bool
}

// trackerConfig is what a Tracker needs.
type trackerConfig struct {
	Nodes   Nodes
	Rule    Rule
	Metrics *Metrics
	Log     logrus.FieldLogger
	// Changed (optional) is called after a new signal was recorded: the convergence
	// loop passes its revisions again. It must not block.
	Changed func()
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// termForget is how long a term nobody asked about keeps its gauges.
const termForget = time.Hour

// verdictTTL is how long a term's verdict is reused while no signal changes: one pass
// over many revisions of the same term walks the nodes once.
const verdictTTL = time.Second

// Tracker keeps the signals of the cluster's nodes and answers, per term, whether it is
// at risk. Safe for concurrent use.
type Tracker struct {
	cfg trackerConfig
	mu  sync.Mutex
	// seen holds the keys of the events recorded, with their time, until they leave
	// the window: a duplicate is known as long as it could matter.
	seen map[string]time.Time
	// signals are the recorded signals by instance id, never by node name: EKS names
	// nodes after private IPs, which EC2 gives to a new instance once the old one is
	// gone, and the new node must not inherit the old instance's signal.
	signals map[string]NodeSignals
	// blocks are the Capacity Blocks whose end was announced, by reservation id: a node
	// labelled with one (strategy.ReservationIDLabel) is signalled until the block's end, Karpenter
	// nodes launched into it after the warning included.
	blocks map[string]block
	// terms are the terms asked about (Assess), by label string: the metrics' terms.
	terms      map[string]*termState
	generation uint64
}

// block is a Capacity Block whose end was announced: when (at) and its end.
type block struct{ at, end time.Time }

type termState struct {
	term    strategy.Term
	asked   time.Time
	verdict Verdict
	at      time.Time
	gen     uint64
}

// newTracker validates cfg and returns a tracker.
func newTracker(cfg trackerConfig) (*Tracker, error) {
	if cfg.Nodes == nil || cfg.Metrics == nil || cfg.Log == nil {
		return nil, errors.New("interruption: nodes, metrics and log are required")
	}
	if err := cfg.Rule.Validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Tracker{cfg: cfg, seen: map[string]time.Time{}, signals: map[string]NodeSignals{}, blocks: map[string]block{}, terms: map[string]*termState{}}, nil
}

// Handle judges one message body from a queue whose events come from want: a signal is
// recorded, anything else is logged and counted. Only a Retry outcome leaves the
// message in the queue.
func (t *Tracker) Handle(body []byte, want Origin) Outcome {
	now := t.cfg.Now()
	log := t.cfg.Log
	sig, err := decode(body)
	if err != nil {
		var de *decodeError
		reason := resultMalformed
		if errors.As(err, &de) {
			reason = de.Reason
		}
		log.WithField("result", reason).Warnf("interruption queue: message dropped, not an EC2 event this reads: %v", err)
		return t.count(reason)
	}
	log = log.WithFields(logrus.Fields{"kind": sig.Kind, "instance": sig.Instance, "event": sig.ID, "time": sig.Time})
	switch {
	case want.Account != "" && sig.Account != want.Account:
		log.WithField("result", resultOtherAccount).Warnf("interruption queue: event of account %s dropped, the queue's account is %s", clip(sig.Account), want.Account)
		return t.count(resultOtherAccount)
	case want.Region != "" && sig.Region != want.Region:
		log.WithField("result", resultOtherRegion).Warnf("interruption queue: event of region %s dropped, the queue's region is %s", clip(sig.Region), want.Region)
		return t.count(resultOtherRegion)
	case !sig.Counts():
		log.WithField("result", resultIgnored).Debugf("interruption queue: state change to %s is no loss of capacity", sig.State)
		return t.count(resultIgnored)
	}
	// EC2's clock may run ahead of this one: a signal is never taken as later than now.
	at := sig.Time
	if at.After(now) {
		at = now
	}
	window := t.cfg.Rule.Window
	if sig.Kind == KindCapacityBlockEnd {
		// The warning holds until the block's end, whatever its age.
		if !now.Before(sig.End) {
			log.WithField("result", resultStale).Infof("interruption queue: Capacity Block %s ended at %s; event dropped", sig.Reservation, sig.End.UTC().Format(time.RFC3339))
			return t.count(resultStale)
		}
	} else if now.Sub(at) >= window {
		log.WithField("result", resultStale).Infof("interruption queue: event from %s ago dropped, older than INTERRUPTION_WINDOW (%s)", now.Sub(at).Round(time.Second), window)
		return t.count(resultStale)
	}
	if !t.cfg.Nodes.HasSynced() {
		return Outcome{Retry: true}
	}
	t.mu.Lock()
	if _, dup := t.seen[sig.Key()]; dup {
		t.mu.Unlock()
		log.WithField("result", resultDuplicate).Debug("interruption queue: event seen before")
		return t.count(resultDuplicate)
	}
	if sig.Kind == KindCapacityBlockEnd {
		return t.recordBlock(sig, at, log)
	}
	node, ok := t.cfg.Nodes.ByInstance(sig.Instance)
	if !ok {
		t.mu.Unlock()
		log.WithField("result", resultUnknownInstance).Infof("interruption queue: no node of the cluster is instance %s (spec.providerID); event dropped", sig.Instance)
		return t.count(resultUnknownInstance)
	}
	t.seen[sig.Key()] = at
	ns, had := t.signals[node.Instance]
	if !had {
		ns = NodeSignals{Instance: node.Instance, At: map[Kind]time.Time{}}
	}
	if at.After(ns.At[sig.Kind]) { // a reordered, older event keeps the later time
		ns.At[sig.Kind] = at
	}
	t.signals[node.Instance] = ns
	t.generation++
	for key, ts := range t.terms {
		if ts.term.SelectedBy(node.Labels) {
			t.cfg.Metrics.signals.WithLabelValues(key, string(sig.Kind)).Inc()
		}
	}
	t.mu.Unlock()
	log.WithFields(logrus.Fields{"node": node.Name, "result": resultSignal}).Infof("interruption signal: %s for node %s (instance %s) at %s", sig.Kind, node.Name, sig.Instance, at.UTC().Format(time.RFC3339))
	if t.cfg.Changed != nil {
		t.cfg.Changed()
	}
	return t.count(resultSignal)
}

// recordBlock records a Capacity Block's warning, with t.mu held (and released): the
// nodes labelled with its reservation are signalled until its end. A reservation no
// node of the cluster is on is dropped, as an unknown instance is.
func (t *Tracker) recordBlock(sig Signal, at time.Time, log logrus.FieldLogger) Outcome {
	var names []string
	t.cfg.Nodes.Each(func(n Node) {
		if n.Labels[strategy.ReservationIDLabel] != sig.Reservation {
			return
		}
		names = append(names, n.Name)
		for key, ts := range t.terms {
			if ts.term.SelectedBy(n.Labels) {
				t.cfg.Metrics.signals.WithLabelValues(key, string(sig.Kind)).Inc()
			}
		}
	})
	log = log.WithField("reservation", sig.Reservation)
	if len(names) == 0 {
		t.mu.Unlock()
		log.WithField("result", resultUnknownInstance).Infof("interruption queue: no node of the cluster is on capacity reservation %s (label %s); event dropped", sig.Reservation, strategy.ReservationIDLabel)
		return t.count(resultUnknownInstance)
	}
	t.seen[sig.Key()] = at
	b := t.blocks[sig.Reservation]
	t.blocks[sig.Reservation] = block{at: later(b.at, at), end: later(b.end, sig.End)}
	t.generation++
	t.mu.Unlock()
	log.WithFields(logrus.Fields{"nodes": len(names), "result": resultSignal}).Infof("interruption signal: Capacity Block %s ends at %s; its %d nodes are signalled until then (%s)",
		sig.Reservation, sig.End.UTC().Format(time.RFC3339), len(names), strings.Join(firstOf(names, 8), ", "))
	if t.cfg.Changed != nil {
		t.cfg.Changed()
	}
	return t.count(resultSignal)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// firstOf returns up to max of names, sorted, with "+N more" for the rest.
func firstOf(names []string, max int) []string {
	slices.Sort(names)
	if len(names) > max {
		return append(names[:max:max], fmt.Sprintf("+%d more", len(names)-max))
	}
	return names
}

func (t *Tracker) count(result string) Outcome {
	t.cfg.Metrics.messages.WithLabelValues(result).Inc()
	return Outcome{Result: result}
}

// Assess applies the rule to term at now: its nodes are those whose labels carry every
// label of the term. The answer is shared, read only.
func (t *Tracker) Assess(term strategy.Term, now time.Time) Verdict {
	key := term.LabelString()
	t.mu.Lock()
	defer t.mu.Unlock()
	ts := t.terms[key]
	if ts == nil {
		ts = &termState{term: term}
		t.terms[key] = ts
	}
	ts.asked = now
	if len(t.signals) == 0 && len(t.blocks) == 0 {
		return Verdict{rule: t.cfg.Rule, now: now}
	}
	return t.assessLocked(key, ts, now)
}

func (t *Tracker) assessLocked(key string, ts *termState, now time.Time) Verdict {
	if ts.gen == t.generation && !ts.at.IsZero() && !now.Before(ts.at) && now.Sub(ts.at) < verdictTTL {
		return ts.verdict
	}
	var names []string
	// The signals of the instances the term's nodes are now, by node name: a node
	// replaced under the same name is another instance and has none of the old one's.
	byName := map[string]NodeSignals{}
	t.cfg.Nodes.Each(func(n Node) {
		if !ts.term.SelectedBy(n.Labels) {
			return
		}
		names = append(names, n.Name)
		ns, ok := t.signals[n.Instance]
		ok = ok && n.Instance != ""
		if b, on := t.blocks[n.Labels[strategy.ReservationIDLabel]]; on {
			at := map[Kind]time.Time{KindCapacityBlockEnd: b.at}
			for k, a := range ns.At {
				at[k] = a
			}
			ns, ok = NodeSignals{Instance: n.Instance, At: at, Ends: b.end}, true
		}
		if ok {
			byName[n.Name] = ns
		}
	})
	v := t.cfg.Rule.Assess(names, byName, now)
	ts.verdict, ts.at, ts.gen = v, now, t.generation
	t.cfg.Metrics.nodesAtRisk.WithLabelValues(key).Set(float64(len(v.Signalled)))
	at := 0.0
	if v.AtRisk {
		at = 1
	}
	t.cfg.Metrics.termAtRisk.WithLabelValues(key).Set(at)
	return v
}

// Refresh forgets signals and event keys that left the window and terms nobody asked
// about for an hour, and sets every term's gauges as of now.
func (t *Tracker) Refresh(now time.Time) {
	window := t.cfg.Rule.Window
	t.mu.Lock()
	defer t.mu.Unlock()
	for key, at := range t.seen {
		if !within(at, now, window) && !at.After(now) {
			delete(t.seen, key)
		}
	}
	for instance, ns := range t.signals {
		for k, at := range ns.At {
			if !within(at, now, window) && !at.After(now) {
				delete(ns.At, k)
				t.generation++
			}
		}
		if len(ns.At) == 0 {
			delete(t.signals, instance)
		}
	}
	for id, b := range t.blocks {
		if !now.Before(b.end) {
			delete(t.blocks, id)
			t.generation++
		}
	}
	for key, ts := range t.terms {
		if now.Sub(ts.asked) > termForget {
			delete(t.terms, key)
			t.cfg.Metrics.nodesAtRisk.DeleteLabelValues(key)
			t.cfg.Metrics.termAtRisk.DeleteLabelValues(key)
			continue
		}
		t.assessLocked(key, ts, now)
	}
}

// Run refreshes every interval until ctx ends, then zeroes the gauges (another replica
// reads the queue now).
func (t *Tracker) Run(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			t.cfg.Metrics.nodesAtRisk.Reset()
			t.cfg.Metrics.termAtRisk.Reset()
			t.cfg.Metrics.reachable.Set(0)
			return
		case <-tick.C:
			t.Refresh(t.cfg.Now())
		}
	}
}
