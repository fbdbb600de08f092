package awsfake

import (
	"encoding/json"
	"net/http"
	"strings"
)

// EKS answers ListNodegroups and DescribeNodegroup (EKS's REST-JSON protocol) for one
// cluster's managed node groups, each given as DescribeNodegroup's "nodegroup" object.
// It is immutable once built, so safe for concurrent use.
type EKS struct {
	cluster string
	groups  map[string]map[string]any
	order   []string
}

// NewEKS serves groups as the node groups of cluster.
func NewEKS(cluster string, groups ...map[string]any) *EKS {
	e := &EKS{cluster: cluster, groups: map[string]map[string]any{}}
	for _, g := range groups {
		name, _ := g["nodegroupName"].(string)
		e.groups[name] = g
		e.order = append(e.order, name)
	}
	return e
}

// ServeHTTP implements http.Handler.
func (e *EKS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	restErr := func(status int, code, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Amzn-ErrorType", code)
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
	}
	if !signedFor(r, "eks") {
		restErr(http.StatusForbidden, "AccessDeniedException", "request not signed for service eks")
		return
	}
	prefix := "/clusters/" + e.cluster + "/node-groups"
	var out any
	switch {
	case r.Method == http.MethodGet && r.URL.Path == prefix:
		out = map[string]any{"nodegroups": e.order}
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, prefix+"/"):
		g, ok := e.groups[strings.TrimPrefix(r.URL.Path, prefix+"/")]
		if !ok {
			restErr(http.StatusNotFound, "ResourceNotFoundException", "no node group "+r.URL.Path)
			return
		}
		out = map[string]any{"nodegroup": g}
	default:
		restErr(http.StatusNotFound, "ResourceNotFoundException", "No cluster found for "+r.URL.Path)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
