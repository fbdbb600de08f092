package clusterview

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// Revision names one seat sequence: a ReplicaSet (or StatefulSet), by its namespace
// and UID. The namespace is part of the key so that pods of another namespace naming
// the ReplicaSet's UID in a forged controller reference never count (tenant isolation).
type Revision struct {
	Namespace string
	UID       types.UID
}

// NamespaceFilter decides which namespaces the webhook leaves alone: admission skips
// their pods and the convergence loop their workloads.
type NamespaceFilter struct {
	// Blocklist holds BLOCKLISTED_NAMESPACE_LIST.
	Blocklist map[string]bool
	// Own is the webhook's own namespace, always skipped so it can never block itself.
	Own string
}

// Skip reports whether pods of namespace ns are left alone.
func (f NamespaceFilter) Skip(ns string) bool { return ns == f.Own || f.Blocklist[ns] }

// PlacedSeat returns the revision a placed ReplicaSet or Job pod counts in and its seat (the
// custom-kube-scheduler-webhook.io/seat annotation); ok is false for any other pod.
// The revision's namespace is the pod's own: a controller reference never crosses
// namespaces, so a pod naming another namespace's ReplicaSet UID counts in a revision
// of its own.
func PlacedSeat(pod *corev1.Pod) (rev Revision, seat int, ok bool) {
	ref := metav1.GetControllerOfNoCopy(pod)
	// A Job's pods count in the Job (an Indexed Job's too: the seat is its index + 1).
	if ref == nil || (ref.Kind != "ReplicaSet" && !IsJob(ref)) {
		return Revision{}, 0, false
	}
	if seat, ok = strategy.SeatOf(pod); !ok {
		return Revision{}, 0, false
	}
	return Revision{Namespace: pod.Namespace, UID: ref.UID}, seat, true
}
