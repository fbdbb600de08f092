// Package webhook is the admission webhook's HTTP and admission plumbing: the TLS
// server and its drain, admission limits (body cap, in-flight gate), the admission
// token's door, one decode of each AdmissionReview, Allow (the answer that changes
// nothing, with warnings) and the admission metrics. What an admission decides lives
// with its concept: pod placement in webhook/placement, the validation of workloads in
// webhook/validation; cmd hands their Admit functions to Handlers.
//
// It imports none of the product's packages; only cmd and the admission handlers
// import it (internal/layout checks the package graph).
package webhook
