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

	karpresources "sigs.k8s.io/karpenter/pkg/utils/resources"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
)

// Karpenter's objects say most of it (karpenter.CannotLaunch: the NodePools serving a
// term, their limits and status, the NodeClaims launching for it); the words of its
// Events are the second opinion, and the only one where the objects do not tell (limits
// that leave less than any instance type the pool may launch, for instance).
//
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

// wordKind is the structured kind of block (karpenter.Blocked*) each of those words
// names, to tell whether the Event agrees with the structured verdict.
var wordKind = map[string]string{
	"exceed limits for nodepool": karpenter.BlockedLimits,
	"limits have been exhausted": karpenter.BlockedLimits,
	"no nodepools found":         karpenter.BlockedNoNodePool,
	"insufficient capacity":      karpenter.BlockedLaunch,
}

// incompatible marks a clause about a NodePool that cannot serve the pod at all.
func incompatible(clause string) bool {
	return strings.Contains(clause, "incompatible") || strings.Contains(clause, "did not tolerate")
}

// LaunchViews is what the capacity catalog knows of the NodePools that could launch for
// a term (*karpenter.Catalog).
type LaunchViews interface {
	LaunchView(term map[string]string) karpenter.LaunchView
}

// KarpenterSignals says why Karpenter cannot launch capacity for a term's pending pods:
// first from its objects (the NodePools serving the term, their limits and status, the
// NodeClaims launching for it: karpenter.CannotLaunch), then from the words of its
// FailedScheduling Events on the pod, the second opinion.
type KarpenterSignals struct {
	client kubernetes.Interface
	// views and launches give the structured signal; nil views leaves only the words.
	views    LaunchViews
	launches Launches
	// minAge: Karpenter gets this long to try before its word is taken; checked
	// records the last look per pod so a pass every few seconds lists Events rarely.
	minAge  time.Duration
	mu      sync.Mutex
	checked map[types.UID]time.Time
}

// NewKarpenterSignals returns signals read through client, views (the NodePools, may be
// nil: Event words only) and launches (the NodeClaims, may be nil).
func NewKarpenterSignals(client kubernetes.Interface, views LaunchViews, launches Launches) *KarpenterSignals {
	return &KarpenterSignals{client: client, views: views, launches: launches, minAge: 10 * time.Second, checked: map[types.UID]time.Time{}}
}

// Unlaunchable implements Signals: it looks at the oldest pending pod. The answer says
// which signal decided: "Karpenter: <what its objects say>" (with "(its Event agrees:
// ...)" or "(its Event says: ...)" when an Event has words too), or "Karpenter's Event:
// <its words>" when only the Event says it.
func (k *KarpenterSignals) Unlaunchable(ctx context.Context, labels map[string]string, pending []clusterview.PlacedPod) string {
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

	verdict := k.structured(ctx, labels, pod, now)
	var words string
	var wordKinds []string
	list, err := k.client.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.uid": string(pod.UID), "reason": "FailedScheduling"}.String(),
	})
	if err == nil {
		words, wordKinds = eventWords(list.Items)
	}
	return decide(verdict, words, wordKinds)
}

// structured is karpenter.CannotLaunch for pod, whose requests are read from the API:
// a LIST by name, which the chart's RBAC allows (it grants no GET of pods). When they
// cannot be read, the verdict goes on without them (only limits used up entirely count
// then).
func (k *KarpenterSignals) structured(ctx context.Context, labels map[string]string, pod *clusterview.PlacedPod, now time.Time) karpenter.Verdict {
	if k.views == nil {
		return karpenter.Verdict{}
	}
	view := k.views.LaunchView(labels)
	if !view.Watching {
		return karpenter.Verdict{}
	}
	var requests corev1.ResourceList
	list, err := k.client.CoreV1().Pods(pod.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String(),
	})
	if err == nil {
		for i := range list.Items {
			if list.Items[i].UID == pod.UID {
				requests = karpresources.RequestsForPods(&list.Items[i])
			}
		}
	}
	var f karpenter.Flight
	if k.launches != nil {
		f = k.launches.Flight(labels, now)
	}
	return karpenter.CannotLaunch(view, requests, f)
}

// decide joins the structured verdict and the Event's words into the reason recorded,
// saying which decided; "" when neither says Karpenter cannot launch.
func decide(v karpenter.Verdict, words string, wordKinds []string) string {
	var msg string
	switch {
	case v.Blocked() && words != "":
		agree := "says"
		for _, kind := range wordKinds {
			if slices.Contains(v.Kinds, kind) {
				agree = "agrees"
			}
		}
		msg = "Karpenter: " + v.Message + " (its Event " + agree + ": " + words + ")"
	case v.Blocked():
		msg = "Karpenter: " + v.Message
	case words != "":
		msg = "Karpenter's Event: " + words
	default:
		return ""
	}
	if len(msg) > 500 {
		msg = msg[:500] + "..."
	}
	return msg
}

// Nominated says which of pods (UIDs, all in namespace) Karpenter has nominated to a
// NodeClaim or node (its Nominated Events) since it last said it cannot schedule them
// (its FailedScheduling Events): a nomination for a claim that failed is over. Two
// Events LISTs of the namespace, by reason: the evidence a strike reports, and the
// waiting pods of an unavailable term that stay for the capacity on its way
// (readNominations), so they run only when such a term has some.
func (k *KarpenterSignals) Nominated(ctx context.Context, namespace string, pods map[types.UID]bool) (map[types.UID]bool, error) {
	latest := map[string]map[types.UID]time.Time{}
	for _, reason := range []string{"Nominated", "FailedScheduling"} {
		list, err := k.client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"reason": reason}.String(),
		})
		if err != nil {
			return nil, fmt.Errorf("list %s events in %s: %w", reason, namespace, err)
		}
		at := map[types.UID]time.Time{}
		for i := range list.Items {
			e := &list.Items[i]
			uid := e.InvolvedObject.UID
			if e.Reason != reason || !pods[uid] || !byKarpenter(e) {
				continue
			}
			if last, seen := at[uid]; !seen || eventTime(e).After(last) {
				at[uid] = eventTime(e)
			}
		}
		latest[reason] = at
	}
	nominated := map[types.UID]bool{}
	for uid, at := range latest["Nominated"] {
		// Event times have a second's resolution: a tie counts as nominated (the
		// term's NodeClaims progressing still bounds the wait).
		if failed, ok := latest["FailedScheduling"][uid]; !ok || !failed.After(at) {
			nominated[uid] = true
		}
	}
	return nominated, nil
}

// eventWords returns Karpenter's latest word among events on why it cannot launch for
// the pod, "" if it said nothing of the kind: the clauses about limits or capacity, or,
// when every NodePool is incompatible, that no NodePool can serve it; and the kinds of
// block they name (karpenter.Blocked*), to compare with the structured verdict.
func eventWords(events []corev1.Event) (string, []string) {
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
		return "", nil
	}
	var kept, clauses, kinds []string
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
				if kind := wordKind[s]; !slices.Contains(kinds, kind) {
					kinds = append(kinds, kind)
				}
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
		kinds = []string{karpenter.BlockedNoNodePool}
	default:
		return "", nil
	}
	if len(msg) > 400 {
		msg = msg[:400] + "..."
	}
	return msg, kinds
}

// byKarpenter reports whether Karpenter's controller recorded e.
func byKarpenter(e *corev1.Event) bool {
	return e.Source.Component == "karpenter" || e.ReportingController == "karpenter"
}

// eventTime is when e was last seen.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}
