// Package webhook is the admission webhook's HTTP side and its decision: the TLS
// server and its drain, admission limits (body cap, in-flight gate), one decode of
// each AdmissionReview, the mutating decision for pods (PodMutator: workload, strategy,
// seat, capacity, patch), Events and the admission metrics. The validating admission
// of workloads is its subpackage validation.
//
// It reads the cluster through clusterview and claims seats through a SeatLedger (the
// ledger package's Ledger, wired by cmd, which also hands the server the ledger's peer
// handler and its path). It may import strategy, karpenter to merge tolerations, and
// imagearch for the request type of the image architecture lookup
// (ImageArchitectures); what serves a term it asks through the Capacity and
// ArchitectureCapacity interfaces. Only cmd and validation import it (internal/layout
// checks the package graph).
package webhook
