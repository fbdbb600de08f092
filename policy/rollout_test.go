package policy

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	discoveryfake "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
)

// RolloutsServed asks discovery for argoproj.io/v1alpha1 and its rollouts.
func TestRolloutsServed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		resources []*metav1.APIResourceList
		want      bool
	}{
		{"not installed", nil, false},
		{"other kinds only", []*metav1.APIResourceList{{GroupVersion: "argoproj.io/v1alpha1", APIResources: []metav1.APIResource{{Name: "workflows"}}}}, false},
		{"served", []*metav1.APIResourceList{{GroupVersion: "argoproj.io/v1alpha1", APIResources: []metav1.APIResource{{Name: "rollouts"}}}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			disc := &discoveryfake.FakeDiscovery{Fake: &clienttesting.Fake{Resources: tc.resources}}
			got, err := RolloutsServed(disc)
			if err != nil || got != tc.want {
				t.Errorf("RolloutsServed = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
