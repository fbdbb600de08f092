// Package peerauth is how webhook replicas authenticate one another on the calls they
// make to each other (the seat ledger's forwarded claims): by the webhook's serving
// certificate. A replica accepts a peer presenting its own leaf, or, with the
// webhook's CA file beside the certificate, a leaf that CA signed for the same names,
// so replicas holding different leaves during a rotation still accept each other.
// Trust decides; NewClient calls peers with it, Require guards the peer handler.
//
// It imports nothing of this module (internal/layout checks the package graph).
package peerauth
