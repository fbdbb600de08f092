// Package ledger is the seat ledger: it hands out the seats of workload revisions,
// exactly, with any number of webhook replicas and no API write per claim
// (docs/design/seat-ledger.md). Ledger is the entry point: Claim, Peek and Release for
// admission; PodVisible and PodGone to be fed placed pods; PeerHandler for the other
// replicas (cmd guards it and builds the peer client with webhook/peerauth). Open builds serve's
// ledger from its Config (Settings: RESERVATION_TTL, PEER_ADDRESS), fed and started;
// Unsynced and PeerReached (after AwaitPeerAddress) gate readiness.
//
// It may import strategy, clusterview, ownership, client-go and the Prometheus client;
// never webhook or converge.
package ledger
