package policy

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// FuzzDecode feeds arbitrary JSON through what the informer's transform and the
// validating webhook do with a policy: decode, compile, match, resolve. Nothing panics;
// a policy that decodes has a link naming it.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"apiVersion":"custom-kube-scheduler-webhook.io/v1alpha1","kind":"PlacementPolicy","metadata":{"name":"web","namespace":"shop"},"spec":{"strategy":"a=1,base=2:b=1","selector":{"matchLabels":{"app":"web"}},"kinds":["Deployment"],"priority":3}}`,
		`{"apiVersion":"custom-kube-scheduler-webhook.io/v1alpha1","kind":"ClusterPlacementPolicy","metadata":{"name":"spot"},"spec":{"strategy":"a=1","namespaceSelector":{"matchExpressions":[{"key":"tier","operator":"In","values":["batch"]}]}}}`,
		`{"kind":"PlacementPolicy","metadata":{"name":"x","namespace":"y"},"spec":{"strategy":"","selector":{"matchExpressions":[{"key":"","operator":"Near"}]},"kinds":["Pod"]}}`,
		`{"kind":"ClusterPlacementPolicy","metadata":{"name":"x"},"spec":{"priority":"high","selector":[]}}`,
		`{"kind":"PlacementPolicy","spec":null}`,
		`{"kind":"Deployment"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var obj map[string]any
		if err := json.Unmarshal(data, &obj); err != nil {
			return
		}
		c, err := Decode(&unstructured.Unstructured{Object: obj})
		if err != nil {
			return
		}
		if c.Link.Name == "" {
			t.Fatalf("a decoded policy without a name for messages: %+v", c)
		}
		p := newPolicies([]*Compiled{c})
		ns := &Namespace{Labels: map[string]string{"tier": "batch"}}
		links := appendLinks(nil, p, Workload{Namespace: c.Namespace, Kind: "Deployment", Labels: map[string]string{"app": "web"}}, ns, true)
		_ = strategy.Resolve(links...)
		_ = p.match(Workload{Namespace: c.Namespace, Kind: "Rollout"}, nil, false)
	})
}
