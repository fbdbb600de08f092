package policy

import (
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
)

// RolloutResource is Argo Rollouts' Rollout, the one workload kind a policy may select
// that is not in apps/v1. A ReplicaSet a Rollout controls counts its seats as a
// Deployment's ReplicaSet does and takes its strategy from the Rollout, or from a policy
// for kind Rollout.
var RolloutResource = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "rollouts"}

// IsRollout reports whether ref names an Argo Rollout (argoproj.io, any version).
func IsRollout(ref *metav1.OwnerReference) bool {
	return ref != nil && ref.Kind == string(v1alpha1.KindRollout) && strings.HasPrefix(ref.APIVersion, RolloutResource.Group+"/")
}

// RolloutsServed reports whether the API server serves RolloutResource: false, not an
// error, when its group/version is unknown (Argo Rollouts not installed).
func RolloutsServed(disc discovery.DiscoveryInterface) (bool, error) {
	gv := RolloutResource.GroupVersion().String()
	list, err := disc.ServerResourcesForGroupVersion(gv)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering %s: %w", gv, err)
	}
	for _, r := range list.APIResources {
		if r.Name == RolloutResource.Resource {
			return true, nil
		}
	}
	return false, nil
}
