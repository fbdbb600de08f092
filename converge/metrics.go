package converge

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// Metrics are the loop's Prometheus metrics, registered on the webhook's registry.
// Only the elected replica updates them; the others report zero.
type Metrics struct {
	unavailable *prometheus.GaugeVec
	unserved    *prometheus.GaugeVec
	states      *prometheus.GaugeVec
	marks       *prometheus.CounterVec
	riskMarks   *prometheus.CounterVec
	launchWaits *prometheus.CounterVec
	fallback    prometheus.Gauge
	evictions   *prometheus.CounterVec
	pending     prometheus.Gauge
	lag         prometheus.Gauge
	leader      prometheus.Gauge
	passes      *prometheus.CounterVec
	queueDepth  prometheus.Gauge
	termTarget  *prometheus.GaugeVec
	termPods    *prometheus.GaugeVec
	holds       *prometheus.CounterVec
	held        prometheus.Gauge
	waiting     *prometheus.GaugeVec
	// audit is what the policies and namespace defaults in audit mode would do (the
	// policy status writer's count): the workloads they would govern, the pods they
	// would move.
	audit struct{ workloads, moves prometheus.Gauge }
	// stopped is 1 while every move is stopped (Config.Stopped).
	stopped prometheus.Gauge
}

// Audited sets what the sources in audit mode would do: the workloads they would govern
// and the pods enforcing them would move.
func (m *Metrics) Audited(workloads, wouldMove int) {
	m.audit.workloads.Set(float64(workloads))
	m.audit.moves.Set(float64(wouldMove))
}

// NewMetrics creates the metrics and registers them on reg, their names prefixed with
// namespace and "_" (the product's metric namespace, which its binary decides).
func NewMetrics(reg prometheus.Registerer, namespace string) (*Metrics, error) {
	m := newMetrics()
	m.seed()
	reg = prometheus.WrapRegistererWithPrefix(namespace+"_", reg)
	for _, c := range []prometheus.Collector{m.waiting, m.unavailable, m.unserved, m.states, m.marks, m.riskMarks, m.launchWaits, m.fallback, m.evictions, m.pending, m.lag, m.leader, m.passes, m.queueDepth, m.termTarget, m.termPods, m.holds, m.held, m.audit.workloads, m.audit.moves, m.stopped} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// newMetrics creates the metrics, unregistered: the terms', the loop's passes and
// moves', and the audit's.
func newMetrics() *Metrics {
	m := &Metrics{
		unavailable: gaugeVec("terms_unavailable",
			"Terms of workload revisions unavailable now (their seats go to the fallback), by the term's node labels.", "term"),
		unserved: gaugeVec("terms_unserved",
			"Terms of workload revisions that should hold pods but that no NodePool, node group or Ready node serves (most often a typo in a label; their pods stay Pending, then fall back), by the term's node labels.", "term"),
		marks: counterVec("terms_marked_unavailable_total",
			"Times a term of a workload revision was found stranded and marked unavailable, by the term's node labels.", "term"),
		riskMarks: counterVec("terms_marked_at_risk_total",
			"Times a term of a workload revision was marked at risk on EC2's interruption signals (its seats go to the fallback until the signals are quiet for FALLBACK_COOLDOWN), by the term's node labels.", "term"),
		launchWaits: counterVec("terms_kept_launching_total",
			"Times a term whose pods waited FALLBACK_AFTER was not marked unavailable because Karpenter was launching NodeClaims for it, by the term's node labels.", "term"),
		termTarget: gaugeVec("term_target_pods",
			"Pods the workload revisions with a strategy should have on each term now (their targets, an unavailable term's seats on its fallback), summed by the term's node labels and where the strategy came from (source: annotation, PlacementPolicy, ClusterPlacementPolicy, Namespace); set by the replica running the loop, after each pass.", "term", "source"),
		termPods: gaugeVec("term_pods",
			"Live placed pods of the workload revisions with a strategy on each term, summed by the term's node labels and where the strategy came from (source); set by the replica running the loop, after each pass.", "term", "source"),
		fallback: gauge("fallback_pods",
			"Live pods placed on a fallback term because their seat's own term is or was unavailable."),
	}
	m.addLoopMetrics()
	m.addMoveMetrics()
	m.audit.workloads = gauge("audit_workloads",
		"Workloads that a policy or namespace default in audit mode would govern if it were enforced; set by the replica running the loop, with the policies' status.")
	m.audit.moves = gauge("audit_would_move_pods",
		"Pods that enforcing the policies and namespace defaults in audit mode would move (off their target, or without a seat); they place and move none while in audit mode.")
	return m
}

// addLoopMetrics creates the metrics of the loop's election, queue and passes.
func (m *Metrics) addLoopMetrics() {
	m.states = gaugeVec("workload_revisions",
		"Workload revisions the loop acts on, by state as spread says it (exact: every seat on its own term; fallback: seats on a fallback term, or a term nothing serves; off-target: pods the loop still has to move).", "state")
	m.lag = gauge("convergence_lag_seconds",
		"How long the workload revision that has been off its target the longest has been so (0 when every one is exact).")
	m.passes = counterVec("converge_revision_passes_total",
		"Passes over one workload revision, made when something that matters to it changed, by outcome: settled (nothing to wait for), unsettled (passed again shortly: pods wait for a node or to move), retried (an API call failed or the pass ran out of time).", "outcome")
	m.queueDepth = gauge("converge_queue_depth",
		"Workload revisions queued for a pass now (not counting the ones waiting for their time).")
	m.leader = gauge("converge_leader",
		"1 while this replica runs the convergence loop (holds the leader Lease).")
}

// addMoveMetrics creates the metrics of the loop's moves: evictions, what waits, what
// the repeat guard holds, and the stop.
func (m *Metrics) addMoveMetrics() {
	m.evictions = counterVec("converge_evictions_total",
		"Pods evicted by the convergence loop, by reason (stranded, return, drift, unplaced, seat-above-replicas, interruption) and result (evicted, refused by a PodDisruptionBudget, fenced: this replica was no longer sure to lead, capped: the cluster-wide MAX_EVICTIONS_PER_MINUTE was reached).", "reason", "result")
	m.pending = gauge("converge_pending_repairs",
		"Pods the loop still has to move (waiting for the eviction budget or a PodDisruptionBudget).")
	m.holds = counterVec("converge_holds_total",
		"Times the convergence loop held a workload's moves for a reason because the pods it moved for it came back in the same state (the repeat guard), by reason.", "reason")
	m.held = gauge("converge_held_workloads",
		"Workload revisions whose moves the repeat guard held since they were last at their target: their moved pods came back in the same state.")
	m.waiting = gaugeVec("converge_waiting_pods",
		"Pods whose non-urgent move (return, drift, seats above the replica count or held twice) waits, by what for: window (outside the workload's move window), window-cap (its cap of moves per opening is reached), min-fallback-stay (a return before the minimum stay on fallback); and pods on a node whose move of any reason waits for the pace: pace (CONVERGE_MAX_UNAVAILABLE_CLUSTER or CONVERGE_MAX_UNAVAILABLE_PER_NAMESPACE pods the loop evicted are not Ready again, or workloads before it in the pace's order wait).", "for")
	m.stopped = gauge("converge_moves_stopped",
		"1 while every move of the convergence loop is stopped (the webhook's namespace is annotated custom-kube-scheduler-webhook.io/converge=false): it evicts nothing until the annotation goes.")
}

// seed creates the eviction, pass, state, hold and wait series at 0, for rates and
// alerts from the start.
func (m *Metrics) seed() {
	for _, state := range []strategy.State{strategy.StateExact, strategy.StateFallback, strategy.StateOffTarget} {
		m.states.WithLabelValues(string(state))
	}
	for _, outcome := range []string{"settled", "unsettled", "retried"} {
		m.passes.WithLabelValues(outcome)
	}
	for _, reason := range []string{MoveStranded, MoveReturn, MoveDrift, MoveUnplaced, MoveSeatAbove, MoveSeatTwice, MoveInterruption} {
		for _, result := range []string{"evicted", "refused", "fenced", "capped"} {
			m.evictions.WithLabelValues(reason, result)
		}
		if guarded(reason) {
			m.holds.WithLabelValues(reason)
		}
	}
	for _, what := range waitNames {
		m.waiting.WithLabelValues(what)
	}
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}
