package report

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
)

// RolloutResource is Argo Rollouts' Rollout, as the webhook follows it.
var RolloutResource = policy.RolloutResource

// rolloutRevisionAnnotation is Argo Rollouts' revision on a Rollout's ReplicaSets.
const rolloutRevisionAnnotation = "rollout.argoproj.io/revision"

// isRollout reports whether ref names an Argo Rollout.
func isRollout(ref *metav1.OwnerReference) bool { return policy.IsRollout(ref) }

// readRollouts reads the metadata of the namespace's (every namespace's: "") Rollouts
// into st when the API server serves them, as the webhook does; unseen says when they
// could not be read (their ReplicaSets are then shown as bare ones).
func readRollouts(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, ns string, st *State) (unseen []string) {
	if served, err := policy.RolloutsServed(client.Discovery()); err != nil || !served {
		return nil // not served (or discovery fails): what the webhook does without them
	}
	l, err := dyn.Resource(RolloutResource).Namespace(ns).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return []string{fmt.Sprintf("Rollouts (%s): the ReplicaSets of Argo Rollouts are shown as bare ReplicaSets", reason(err))}
	}
	for i := range l.Items {
		u := &l.Items[i]
		st.Rollouts = append(st.Rollouts, metav1.ObjectMeta{Namespace: u.GetNamespace(), Name: u.GetName(), UID: u.GetUID(),
			Labels: u.GetLabels(), Annotations: u.GetAnnotations()})
	}
	return nil
}
