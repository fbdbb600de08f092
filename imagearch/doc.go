// Package imagearch finds the CPU architectures a pod's container images can run on:
// the linux platforms of each image's index, or of a single image's config, read from
// its registry with go-containerregistry, and intersected over every container and
// init container of the pod.
//
// It owns the lookup and what it remembers: a cache keyed by image reference (a
// reference pinned by digest is remembered for ever, a tag for a TTL, a failure
// briefly, the whole bounded in entries), one lookup in flight per reference however
// many admissions ask (singleflight), and the registry credentials: the pod's and its
// ServiceAccount's imagePullSecrets (when allowed to read them), an ECR authorization
// token through aws-sdk-go-v2 for ECR hosts (region from the host), anonymous
// otherwise. A caller bounds its wait with its context; a lookup it stops waiting for
// goes on in the background and fills the cache for the next pod.
//
// A pod's creator chooses the registry, so what a registry can cost is bounded: every
// request of a lookup passes one guard transport (remote.WithTransport) that bounds
// bodies, redirects and time, and dials only addresses the registry may use (not
// loopback, link-local or the refused networks, unless listed); errors are
// RegistryErrors that carry the registry and the HTTP status, never what it sent;
// failures are cached apart from answers, bounded in bytes; lookup slots are shared
// fairly per registry and per namespace; a pod's images are capped (MaxImagesPerPod).
//
// It imports no package of this module (client-go, k8s.io/api, go-containerregistry,
// the AWS SDK and the Prometheus client only); the webhook, the validating webhook and
// `plan --cluster` use it.
package imagearch
