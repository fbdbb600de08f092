package converge

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Karpenter (v1) says on the pod itself when it cannot launch capacity for it: a
// Warning Event, reason FailedScheduling, from the "karpenter" controller, whose
// message names the NodePools and why ("all available instance types exceed limits
// for nodepool", "node limits have been exhausted for nodepool", "no nodepools found",
// incompatible requirements). The kube-scheduler's own FailedScheduling events have
// another source and are not read.
var unlaunchable = []string{
	"exceed limits for nodepool",
	"limits have been exhausted",
	"no nodepools found",
	"insufficient capacity",
	"incompatible with nodepool",
	"did not tolerate",
}

// KarpenterSignals reads Karpenter's FailedScheduling Events of pending pods.
type KarpenterSignals struct {
	client kubernetes.Interface
	// minAge: Karpenter gets this long to try before its word is taken; checked
	// records the last look per pod so a pass every few seconds lists Events rarely.
	minAge  time.Duration
	mu      sync.Mutex
	checked map[types.UID]time.Time
}

// NewKarpenterSignals returns signals read through client.
func NewKarpenterSignals(client kubernetes.Interface) *KarpenterSignals {
	return &KarpenterSignals{client: client, minAge: 10 * time.Second, checked: map[types.UID]time.Time{}}
}

// Unlaunchable implements Signals: it looks at the oldest pending pod's Events.
func (k *KarpenterSignals) Unlaunchable(ctx context.Context, _ map[string]string, pending []*corev1.Pod) string {
	now := time.Now()
	var pod *corev1.Pod
	var age time.Duration
	for _, p := range pending {
		if since, ok := unschedulableSince(p); ok && now.Sub(since) >= age {
			pod, age = p, now.Sub(since)
		}
	}
	if pod == nil || age < k.minAge {
		return ""
	}
	k.mu.Lock()
	for uid, at := range k.checked {
		if now.Sub(at) > time.Minute {
			delete(k.checked, uid)
		}
	}
	if at, ok := k.checked[pod.UID]; ok && now.Sub(at) < k.minAge {
		k.mu.Unlock()
		return ""
	}
	k.checked[pod.UID] = now
	k.mu.Unlock()

	list, err := k.client.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.uid": string(pod.UID), "reason": "FailedScheduling"}.String(),
	})
	if err != nil {
		return ""
	}
	return karpenterWord(list.Items)
}

// karpenterWord returns Karpenter's latest unlaunchable message among events, "" if none.
func karpenterWord(events []corev1.Event) string {
	var best *corev1.Event
	for i := range events {
		e := &events[i]
		if e.Source.Component != "karpenter" && e.ReportingController != "karpenter" {
			continue
		}
		msg := strings.ToLower(e.Message)
		for _, s := range unlaunchable {
			if strings.Contains(msg, s) && (best == nil || eventTime(e).After(eventTime(best))) {
				best = e
			}
		}
	}
	if best == nil {
		return ""
	}
	// The message joins one clause per NodePool tried; keep those that say why it
	// cannot launch (not the pools the pod was never compatible with).
	var kept []string
	for _, clause := range strings.Split(strings.TrimPrefix(best.Message, "Failed to schedule pod, "), "; ") {
		lower := strings.ToLower(clause)
		if strings.HasPrefix(lower, "incompatible requirements") {
			continue
		}
		for _, s := range unlaunchable {
			if strings.Contains(lower, s) && !slices.Contains(kept, clause) {
				kept = append(kept, clause)
				break
			}
		}
	}
	msg := strings.Join(kept, "; ")
	if len(msg) > 400 {
		msg = msg[:400] + "..."
	}
	return "Karpenter: " + msg
}

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}
