package ledger

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Labels of the ledger's metrics.
const (
	// claim answers
	claimOwner     = "owner"     // answered from this replica's memory, as the revision's owner
	claimForwarded = "forwarded" // answered by the owner, over HTTPS
	claimFailed    = "failed"    // no seat (deadline, unreachable owner, full record)

	// how this replica came to own a revision
	ownedNew      = "new"        // nobody held its record
	ownedReleased = "released"   // its owner handed it over (stopping)
	ownedLapsed   = "lapsed"     // its owner's record went unrenewed for the ownership duration
	ownedGone     = "owner_gone" // its owner's address refused, or another process answered there
)

// ledgerMetrics count what the seat ledger does (RegisterMetrics).
type ledgerMetrics struct {
	claims      *prometheus.CounterVec
	ownership   *prometheus.CounterVec
	handovers   prometheus.Counter
	unfulfilled prometheus.Counter
	displaced   prometheus.Counter
}

// newLedgerMetrics returns the ledger's metrics.
func newLedgerMetrics() *ledgerMetrics {
	m := &ledgerMetrics{
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seat_claims_total",
			Help: "Seat claims of this replica's admissions, by how they were answered: owner (from memory), forwarded (by the owning replica), failed.",
		}, []string{"answer"}),
		ownership: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "seat_revisions_taken_total",
			Help: "Revisions whose seats this replica took to answer, by the state of their record: new, released (handed over), lapsed (unrenewed), owner_gone.",
		}, []string{"from"}),
		handovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seat_revisions_handed_over_total",
			Help: "Revisions this replica handed to another replica, or released, when stopping.",
		}),
		unfulfilled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seat_reservations_expired_unfulfilled_total",
			Help: "Seat reservations held by this replica that expired with no pod seen for them: pods rejected after the webhook (a quota), abandoned admissions, or forged AdmissionReviews.",
		}),
		displaced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "seat_reservations_displaced_total",
			Help: "Seat reservations whose pod was not seen yet that gave their seat to a new claim, their revision having reached the record's cap of reservations in flight: a flood of admissions whose pods never show up.",
		}),
	}
	for _, a := range []string{claimOwner, claimForwarded, claimFailed} {
		m.claims.WithLabelValues(a)
	}
	for _, f := range []string{ownedNew, ownedReleased, ownedLapsed, ownedGone} {
		m.ownership.WithLabelValues(f)
	}
	return m
}

// RegisterMetrics registers the ledger's metrics on reg, prefixed with namespace + "_".
func (l *Ledger) RegisterMetrics(reg prometheus.Registerer, namespace string) error {
	reg = prometheus.WrapRegistererWithPrefix(namespace+"_", reg)
	for _, c := range []prometheus.Collector{l.metrics.claims, l.metrics.ownership, l.metrics.handovers, l.metrics.unfulfilled, l.metrics.displaced} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register seat ledger metrics: %w", err)
		}
	}
	return nil
}

// countClaim counts a claim's answer; forwarded tells whether it last went to a peer.
func (m *ledgerMetrics) countClaim(err error, forwarded bool) {
	switch {
	case err != nil:
		m.claims.WithLabelValues(claimFailed).Inc()
	case forwarded:
		m.claims.WithLabelValues(claimForwarded).Inc()
	default:
		m.claims.WithLabelValues(claimOwner).Inc()
	}
}

// takenFrom names how a revision came to this replica (prev: its record's holder; "":
// counted already, when handed over in memory: succeed).
func takenFrom(s *revState, prev string, hadRecord bool) string {
	switch {
	case !hadRecord:
		return ownedNew
	case s.handedBy != "" && prev == s.handedBy:
		return ""
	case prev == "":
		return ownedReleased
	case s.goneHolder == prev:
		return ownedGone
	}
	return ownedLapsed
}
