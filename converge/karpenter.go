package converge

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
)

// Karpenter (v1) says on the pod itself when it cannot launch capacity for it: a
// Warning Event, reason FailedScheduling, from the "karpenter" controller, whose message
// joins one clause per NodePool tried ("all available instance types exceed limits for
// nodepool (NodePool=spot)", "node limits have been exhausted for nodepool", "no
// nodepools found", or "incompatible requirements, key ..." for a pool that cannot serve
// the pod at all). Karpenter exports none of these words: a test finds each in the source
// of the version in go.mod, and e2e sees them from its kwok provider. The
// kube-scheduler's own FailedScheduling events have another source and are not read.
var unlaunchable = []string{
	"exceed limits for nodepool",
	"limits have been exhausted",
	"no nodepools found",
	"insufficient capacity",
}

// incompatible marks a clause about a NodePool that cannot serve the pod at all.
func incompatible(clause string) bool {
	return strings.Contains(clause, "incompatible") || strings.Contains(clause, "did not tolerate")
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
func (k *KarpenterSignals) Unlaunchable(ctx context.Context, _ map[string]string, pending []clusterview.PlacedPod) string {
	now := time.Now()
	var pod *clusterview.PlacedPod
	var age time.Duration
	for i, p := range pending {
		if since, ok := p.UnschedulableFor(); ok && now.Sub(since) >= age {
			pod, age = &pending[i], now.Sub(since)
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

// Nominated counts how many of pods (UIDs, all in namespace) Karpenter has nominated to
// a NodeClaim or node (its Nominated Events), from one Events LIST of the namespace: the
// evidence a strike reports, so it runs only when a term is marked.
func (k *KarpenterSignals) Nominated(ctx context.Context, namespace string, pods map[types.UID]bool) (int, error) {
	list, err := k.client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"reason": "Nominated"}.String(),
	})
	if err != nil {
		return 0, fmt.Errorf("list Nominated events in %s: %w", namespace, err)
	}
	nominated := map[types.UID]bool{}
	for _, e := range list.Items {
		if e.Reason == "Nominated" && pods[e.InvolvedObject.UID] && byKarpenter(&e) {
			nominated[e.InvolvedObject.UID] = true
		}
	}
	return len(nominated), nil
}

// karpenterWord returns Karpenter's latest word among events on why it cannot launch
// for the pod, "" if it said nothing of the kind: the clauses about limits or capacity,
// or, when every NodePool is incompatible, that no NodePool can serve it.
func karpenterWord(events []corev1.Event) string {
	var best *corev1.Event
	for i := range events {
		e := &events[i]
		if !byKarpenter(e) {
			continue
		}
		if best == nil || eventTime(e).After(eventTime(best)) {
			best = e
		}
	}
	if best == nil || !strings.HasPrefix(best.Message, "Failed to schedule pod") {
		return ""
	}
	var kept, clauses []string
	for _, clause := range strings.Split(strings.TrimPrefix(best.Message, "Failed to schedule pod, "), "; ") {
		if clause = strings.TrimSpace(clause); clause == "" {
			continue
		}
		clauses = append(clauses, clause)
		lower := strings.ToLower(clause)
		if incompatible(lower) {
			continue
		}
		for _, s := range unlaunchable {
			if strings.Contains(lower, s) && !slices.Contains(kept, clause) {
				kept = append(kept, clause)
				break
			}
		}
	}
	var msg string
	switch {
	case len(kept) > 0:
		msg = strings.Join(kept, "; ")
	case len(clauses) > 0 && !slices.ContainsFunc(clauses, func(c string) bool { return !incompatible(strings.ToLower(c)) }):
		msg = "no NodePool is compatible (" + clauses[0] + ")"
	default:
		return ""
	}
	if len(msg) > 400 {
		msg = msg[:400] + "..."
	}
	return "Karpenter: " + msg
}

// byKarpenter reports whether Karpenter's controller recorded e.
func byKarpenter(e *corev1.Event) bool {
	return e.Source.Component == "karpenter" || e.ReportingController == "karpenter"
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
