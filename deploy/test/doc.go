// Package deploytest holds end-to-end checks of the deploy/ manifests that need Go:
// webhook_selectors_e2e_test.go (build tag e2e) registers the rendered webhook
// configurations against a recording HTTPS endpoint on a real API server and checks
// which pods and workloads the API server calls the webhook for; protocol_test.go checks
// that the chart's call filters spell the product's annotation and label keys.
package deploytest
