package report

import (
	"context"
	"fmt"
	"math"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
)

// RolloutResource is Argo Rollouts' Rollout, as the webhook follows it.
var RolloutResource = policy.RolloutResource

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
	st.RolloutSpecs = make(map[types.UID]RolloutSpec, len(l.Items))
	for i := range l.Items {
		u := &l.Items[i]
		st.Rollouts = append(st.Rollouts, metav1.ObjectMeta{Namespace: u.GetNamespace(), Name: u.GetName(), UID: u.GetUID(),
			Labels: u.GetLabels(), Annotations: u.GetAnnotations()})
		st.RolloutSpecs[u.GetUID()] = rolloutSpecOf(u)
	}
	return nil
}

// RolloutSpec is what a report reads of a Rollout's spec, for one that has no
// ReplicaSet yet: its ReplicaSets' copies are read otherwise.
type RolloutSpec struct {
	Replicas *int32
	// TemplateAnnotations are spec.template's (none with a spec.workloadRef).
	TemplateAnnotations map[string]string
}

// rolloutSpecOf reads u's spec.replicas (unset: Argo Rollouts' default, 1) and pod
// template annotations.
func rolloutSpecOf(u *unstructured.Unstructured) RolloutSpec {
	replicas := int32(1)
	if n, found, err := unstructured.NestedInt64(u.Object, "spec", "replicas"); found && err == nil && n >= 0 && n <= math.MaxInt32 {
		replicas = int32(n)
	}
	ann, _, _ := unstructured.NestedStringMap(u.Object, "spec", "template", "metadata", "annotations")
	return RolloutSpec{Replicas: &replicas, TemplateAnnotations: ann}
}

// noReplicaSetYet is a Rollout's NoRevision before its controller made a ReplicaSet.
const noReplicaSetYet = "no ReplicaSet yet: the Rollout controller has not created one (is Argo Rollouts running?); 0 pods counted"

// addRolloutWithoutReplicaSet reports Rollout ro, which controls no ReplicaSet yet: its
// strategy (from its own and its pod template's annotations, a policy or the namespace
// default) and target for its replicas, with no pods, and says so.
func (r *Report) addRolloutWithoutReplicaSet(st *State, ro *metav1.ObjectMeta, pods eachPod) {
	spec := st.RolloutSpecs[ro.UID] // the zero RolloutSpec: replicas unknown, read as 1
	n := len(r.Workloads)
	r.add(st, &clusterview.WorkloadView{Kind: "Rollout", Meta: *ro, Template: spec.TemplateAnnotations, Replicas: spec.Replicas}, pods, 0)
	if len(r.Workloads) > n {
		r.Workloads[n].NoRevision = noReplicaSetYet
	}
}
