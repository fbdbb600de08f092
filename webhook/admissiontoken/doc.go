// Package admissiontoken keeps the webhook's door closed to anyone but the API server.
//
// The webhook's HTTPS port answers AdmissionReviews only on paths that carry a
// per-install secret token (/<token>/mutate, /<token>/validate). The token lives in a
// Secret in the webhook's namespace and in the clientConfig path of the webhook's own
// MutatingWebhookConfiguration and ValidatingWebhookConfiguration, so only the API
// server, and whoever may read those objects, knows it.
//
// A Keeper, run by every replica, reads the Secret (filling in a token when it has
// none), keeps the set of tokens it accepts, rotates the token when the serving
// certificate is renewed, and writes the current token into both configurations'
// paths. A rotation keeps the previous token accepted for an overlap window and moves
// the configurations to the new one only after a propagation delay, so that every
// replica accepts the new path before the API server uses it: no admission fails.
//
// It imports nothing of this module (internal/layout checks the package graph).
package admissiontoken
