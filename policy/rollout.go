package policy

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

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
