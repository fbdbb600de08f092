// Package placement is pod placement at admission (PodMutator): the pod's workload
// (clusterview), its strategy, a seat from the SeatLedger (the ledger package's Ledger,
// wired by cmd), the unavailable terms (Availability), the decision (decide.go: the
// term or its fallback, conflicts, tolerations from karpenter; no side effects), the
// patch, the image architecture step (ImageArchitectures) and Events. What serves a
// term it asks through the Capacity and ArchitectureCapacity interfaces. Its Settings are
// the admission's knobs serve reads (deadline, on-demand accepting reserved, image lookups).
//
// It may import strategy, clusterview, karpenter (merging tolerations), imagearch (the
// request type of the architecture lookup) and webhook (Allow, the admission outcomes
// and metrics); cmd and webhook/validation (the checks that mirror placement) import it.
package placement
