package interruption

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of a message, the values of the messages metric's "result" label.
const (
	// resultSignal: a new signal for a node of the cluster, recorded.
	resultSignal = "signal"
	// resultDuplicate: an event already recorded (SQS delivers at least once).
	resultDuplicate = "duplicate"
	// resultStale: an event older than the window when it arrived.
	resultStale = "stale"
	// resultIgnored: a state change into a state that is no loss (pending, running).
	resultIgnored = "ignored"
	// resultMalformed: not an EventBridge EC2 event of the expected shape.
	resultMalformed = "malformed"
	// resultUnsupported: an EC2 event of another detail-type.
	resultUnsupported = "unsupported"
	// resultUnknownInstance: no node of the cluster has the instance (or, for a
	// Capacity Block's warning, is on the reservation).
	resultUnknownInstance = "unknown-instance"
	// resultOtherAccount and resultOtherRegion: an event of an account or region other
	// than the queue's.
	resultOtherAccount = "other-account"
	resultOtherRegion  = "other-region"
)

var results = []string{resultSignal, resultDuplicate, resultStale, resultIgnored, resultMalformed, resultUnsupported,
	resultUnknownInstance, resultOtherAccount, resultOtherRegion}

// Reasons a receive failed, the values of the receive errors metric's "reason" label.
const (
	reasonQueueMissing = "queue-missing"
	reasonAccessDenied = "access-denied"
	reasonOther        = "other"
)

// Metrics are the interruption signals' Prometheus metrics; only the elected replica
// reads the queue, the others report zero.
type Metrics struct {
	messages      *prometheus.CounterVec
	receiveErrors *prometheus.CounterVec
	signals       *prometheus.CounterVec
	nodesAtRisk   *prometheus.GaugeVec
	termAtRisk    *prometheus.GaugeVec
	reachable     prometheus.Gauge
}

// newMetrics creates the metrics and registers them on reg, their names prefixed with
// namespace and "_".
func newMetrics(reg prometheus.Registerer, namespace string) (*Metrics, error) {
	reg = prometheus.WrapRegistererWithPrefix(namespace+"_", reg)
	m := &Metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "interruption_messages_total",
			Help: "Messages read from the interruption queue, each handled (and deleted) once, by result: signal (recorded), duplicate, stale (older than INTERRUPTION_WINDOW; a Capacity Block's warning: after its end), ignored (a state change that is no loss), malformed, unsupported (another EC2 event), unknown-instance (or a reservation no node is on), other-account, other-region.",
		}, []string{"result"}),
		receiveErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "interruption_receive_errors_total",
			Help: "Failed reads of the interruption queue, by reason: queue-missing (QueueDoesNotExist), access-denied, other; each is retried with backoff.",
		}, []string{"reason"}),
		signals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "interruption_signals_total",
			Help: "EC2 signals seen for nodes of a term (the term's node labels), by kind: interruption-warning, rebalance-recommendation, state-change, capacity-block-end (per node of the reservation).",
		}, []string{"term", "kind"}),
		nodesAtRisk: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "interruption_nodes_at_risk",
			Help: "Nodes of a term (the term's node labels) with an EC2 signal within INTERRUPTION_WINDOW.",
		}, []string{"term"}),
		termAtRisk: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "interruption_term_at_risk",
			Help: "1 while a term's signalled nodes reach INTERRUPTION_RISK_SHARE (and INTERRUPTION_RISK_MIN_NODES) of its nodes within INTERRUPTION_WINDOW.",
		}, []string{"term"}),
		reachable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "interruption_queue_reachable",
			Help: "1 while the elected replica's last read of the interruption queue succeeded, 0 after a failed one (or on other replicas).",
		}),
	}
	for _, r := range results {
		m.messages.WithLabelValues(r)
	}
	for _, r := range []string{reasonQueueMissing, reasonAccessDenied, reasonOther} {
		m.receiveErrors.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{m.messages, m.receiveErrors, m.signals, m.nodesAtRisk, m.termAtRisk, m.reachable} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register interruption metrics: %w", err)
		}
	}
	return m, nil
}
