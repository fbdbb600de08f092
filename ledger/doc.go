// Package ledger is the seat ledger: it hands out the seats of workload revisions,
// exactly, with any number of webhook replicas and no API write per claim.
//
// It owns the seat records (coordination.k8s.io Leases in the webhook's namespace),
// the ownership protocol between replicas (one owner per revision, takeover of a
// lapsed owner's revision, hand-over on shutdown), the peer transport that forwards
// claims to the owner over HTTPS, and the peer authentication (the same serving
// certificate, or one the webhook's CA signed for the same names). Ledger is the
// entry point: Claim, Peek and Release for admission; PodVisible and PodGone to be
// fed placed pods; PeerHandler for the other replicas.
//
// It may import strategy (annotation and label names), clusterview (Revision and the
// seat a placed pod holds), ownership, client-go and the Prometheus client; never
// webhook or converge.
package ledger
