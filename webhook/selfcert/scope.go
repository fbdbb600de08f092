package selfcert

import (
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
)

// scopedConfig returns a copy of restCfg whose list and watch requests on the Secret and
// webhook-configuration collections carry a metadata.name field selector.
//
// cert-controller builds its own informers (a namespace-wide Secret cache and
// cluster-wide webhook-configuration caches) and offers no option to narrow them. Adding
// the selector at the transport keeps the cache down to the objects it manages and lets
// RBAC grant list/watch by resourceNames: the API server authorizes a list or watch with
// a single metadata.name selector as a request for that name.
func scopedConfig(restCfg *rest.Config, cfg Config) *rest.Config {
	names := map[string]string{
		"/api/v1/namespaces/" + cfg.Namespace + "/secrets": cfg.SecretName,
	}
	if cfg.MutatingWebhookName != "" {
		names["/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"] = cfg.MutatingWebhookName
	}
	if cfg.ValidatingWebhookName != "" {
		names["/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"] = cfg.ValidatingWebhookName
	}
	scoped := rest.CopyConfig(restCfg)
	scoped.UserAgent = FieldOwner + "/selfcert"
	scoped.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &nameScope{next: rt, names: names}
	})
	return scoped
}

// nameScope adds a metadata.name field selector to collection GETs of known paths.
type nameScope struct {
	next  http.RoundTripper
	names map[string]string // collection path suffix -> object name
}

// RoundTrip implements http.RoundTripper.
func (n *nameScope) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		return n.next.RoundTrip(req)
	}
	name, ok := n.lookup(req.URL.Path)
	if !ok {
		return n.next.RoundTrip(req)
	}
	q := req.URL.Query()
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	if old := q.Get("fieldSelector"); old != "" && old != sel {
		sel = old + "," + sel
	}
	q.Set("fieldSelector", sel)
	// A RoundTripper must not modify the caller's request.
	clone := req.Clone(req.Context())
	u := *req.URL
	u.RawQuery = q.Encode()
	clone.URL = &u
	return n.next.RoundTrip(clone)
}

// lookup matches by suffix so a rest.Config host with a path prefix (API proxies) works.
func (n *nameScope) lookup(path string) (string, bool) {
	path = strings.TrimSuffix(path, "/")
	for suffix, name := range n.names {
		if strings.HasSuffix(path, suffix) {
			return name, true
		}
	}
	return "", false
}

var _ http.RoundTripper = (*nameScope)(nil)
