// Package harness holds what the end-to-end tests, the soak and the benchmark share
// to drive the product from outside, as a cluster would: `serve` processes, a
// round-robin proxy in front of them (as a Service spreads requests over replicas),
// Prometheus text scraping (the webhook's and the API server's /metrics) and an
// HTTPS AdmissionReview load generator. It is test infrastructure, not part of the
// webhook.
package harness
