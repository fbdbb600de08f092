package strategy

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The pod-seat protocol: every annotation and label key the webhook, the convergence
// loop and the reports read or write, declared here and nowhere else.

// Annotation keys users write on a pod template or a workload.
const (
	// AnnotationStrategy holds the strategy.
	AnnotationStrategy = "CustomPodScheduleStrategy"
	// AnnotationStrategyAlias is the original project's later spelling, accepted so its
	// users can switch without editing manifests.
	AnnotationStrategyAlias = "custom-pod-schedule-strategy"
	// AnnotationOptIn is the original project's opt-in switch; an explicit "false"
	// turns the strategy off.
	AnnotationOptIn = "UseCustomKubeScheduler"
)

// Keys the webhook writes on the pods it places.
const (
	// AnnotationSeat records the pod's seat (1-based), from which the ledger is rebuilt.
	AnnotationSeat = "custom-kube-scheduler-webhook.io/seat"
	// AnnotationTerm records the 1-based term the seat belongs to, for people and reports.
	AnnotationTerm = "custom-kube-scheduler-webhook.io/term"
	// AnnotationFallbackFrom records, on a pod placed off its seat's own term because
	// that term was unavailable, the 1-based term that owns the seat (AnnotationTerm
	// then names the term used).
	AnnotationFallbackFrom = "custom-kube-scheduler-webhook.io/fallback-from"
	// LabelManaged marks placed pods so that caches can select just those.
	LabelManaged = "custom-kube-scheduler-webhook.io/managed"
	// LabelNamespaceEnabled on a namespace, with the value "true", opts it in when the
	// webhook is registered with scope opt-in (the chart's default `scope: opt-in`).
	LabelNamespaceEnabled = "custom-kube-scheduler-webhook.io/enabled"
	// LabelNamespaceEnabledOriginal on a namespace, with the value "enabled", opts it in
	// as well: the original project's webhook configuration selected it.
	LabelNamespaceEnabledOriginal = "custom-kube-scheduler-webhook"
	// AnnotationReservation records the seat ledger's reservation the pod fulfils (the
	// admission UID), so that every webhook replica seeing the pod can end it.
	AnnotationReservation = "custom-kube-scheduler-webhook.io/reservation"
	// AnnotationCannotRun records, on a pod placed on a term that offers no CPU
	// architecture its images support, why: the pod keeps its seat, and spread counts
	// it as not runnable.
	AnnotationCannotRun = "custom-kube-scheduler-webhook.io/cannot-run"
	// AnnotationDeletionCost is read by the ReplicaSet controller on scale-down.
	AnnotationDeletionCost = "controller.kubernetes.io/pod-deletion-cost"
)

// AnnotationConverge set to "false" on a Deployment, StatefulSet or ReplicaSet opts it
// out of moves: the convergence loop still records unavailable terms (new pods go to
// the fallback) but evicts none of its pods.
const AnnotationConverge = "custom-kube-scheduler-webhook.io/converge"

// AnnotationMoveJobPods set to "true" on a Job or CronJob (or its pod template) lets the
// convergence loop evict the Job's running pods to move them, within its budget; a
// policy's spec.moveJobPods sets it for the Jobs it governs. Without it a Job's pods
// stay where they are placed: a killed batch pod loses its work.
const AnnotationMoveJobPods = "custom-kube-scheduler-webhook.io/move-job-pods"

// Keys of the records (Leases in the webhook's namespace) every replica reads: the seat
// ledger's and the convergence loop's, each selected by its own label.
const (
	// LabelSeatRecord marks the seat ledger's records (value "seats").
	LabelSeatRecord = "custom-kube-scheduler-webhook.io/record"
	// LabelRevision names the revision (ReplicaSet or StatefulSet UID) of a record.
	LabelRevision = "custom-kube-scheduler-webhook.io/revision"
	// LabelRevisionNamespace names the namespace of a seat record's revision.
	LabelRevisionNamespace = "custom-kube-scheduler-webhook.io/revision-namespace"
	// AnnotationReservations lists a seat record's reservations.
	AnnotationReservations = "custom-kube-scheduler-webhook.io/reservations"
	// AnnotationPeer is the base URL at which a seat record's holder answers the
	// claims other replicas forward to it.
	AnnotationPeer = "custom-kube-scheduler-webhook.io/peer"
	// LabelUnavailability marks the convergence loop's unavailability records.
	LabelUnavailability = "custom-kube-scheduler-webhook.io/unavailability"
	// AnnotationUnavailableTerms holds an unavailability record's per-term state as JSON.
	AnnotationUnavailableTerms = "custom-kube-scheduler-webhook.io/unavailable-terms"
	// AnnotationWorkload names the workload of a record's revision, for people.
	AnnotationWorkload = "custom-kube-scheduler-webhook.io/workload"
)

// HoldsSeat reports whether a pod occupies its seat: terminating, failed and succeeded
// pods do not.
func HoldsSeat(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodFailed && pod.Status.Phase != corev1.PodSucceeded
}

// TermOf is the 0-based term of s a placed pod is on: the term admission recorded on it
// when its nodeSelector still selects that term; else the first term its nodeSelector
// selects (what the scheduler acts on; it stays right when the strategy changes); else
// its term annotation; else -1. The recorded term comes first because a term may be
// contained in a later one ("a=1:a=1,b=2"): a pod placed on the later term is selected
// by both, and reading it as the first would move it for ever.
func TermOf(s *Strategy, pod *corev1.Pod) int {
	recorded, _ := strconv.Atoi(pod.Annotations[AnnotationTerm])
	sel := PlacementSelector(pod)
	return TermOfPlaced(s, recorded, func(key string) (string, bool) {
		v, ok := sel[key]
		return v, ok
	})
}

// PlacementSelector is what the pod selects, in a term's LabelMap form: its
// nodeSelector, and for each other key a required node affinity "In" that every
// nodeSelectorTerm carries with the same values (how a set term is patched), as
// those values joined by SetSeparator. It returns the nodeSelector itself when the
// pod has no such affinity.
func PlacementSelector(pod *corev1.Pod) map[string]string {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return pod.Spec.NodeSelector
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return pod.Spec.NodeSelector
	}
	var out map[string]string
	for _, r := range terms[0].MatchExpressions {
		if r.Operator != corev1.NodeSelectorOpIn || len(r.Values) == 0 || slices.ContainsFunc(r.Values, func(v string) bool { return strings.Contains(v, SetSeparator) }) {
			continue
		}
		if _, pinned := pod.Spec.NodeSelector[r.Key]; pinned {
			continue
		}
		if !slices.ContainsFunc(terms[1:], func(t corev1.NodeSelectorTerm) bool { return !hasIn(t, r) }) {
			if out == nil {
				out = make(map[string]string, len(pod.Spec.NodeSelector)+1)
				maps.Copy(out, pod.Spec.NodeSelector)
			}
			if _, seen := out[r.Key]; !seen {
				out[r.Key] = strings.Join(r.Values, SetSeparator)
			}
		}
	}
	if out == nil {
		return pod.Spec.NodeSelector
	}
	return out
}

// hasIn reports whether t carries the requirement r (same key, In, same values).
func hasIn(t corev1.NodeSelectorTerm, r corev1.NodeSelectorRequirement) bool {
	return slices.ContainsFunc(t.MatchExpressions, func(o corev1.NodeSelectorRequirement) bool {
		return o.Key == r.Key && o.Operator == corev1.NodeSelectorOpIn && slices.Equal(o.Values, r.Values)
	})
}

// TermOfPlaced is TermOf for a pod known by its recorded term (1-based, anything else:
// none) and a look-up of its nodeSelector's labels, for readers that hold no Pod.
func TermOfPlaced(s *Strategy, recorded int, label func(key string) (string, bool)) int {
	ok := recorded >= 1 && recorded <= len(s.Terms)
	if ok && s.Terms[recorded-1].selectedByLabel(label) {
		return recorded - 1
	}
	for i, t := range s.Terms {
		if t.selectedByLabel(label) {
			return i
		}
	}
	if !ok {
		return -1
	}
	return recorded - 1
}

// SeatOf reads the seat annotation of a placed pod.
func SeatOf(pod *corev1.Pod) (int, bool) {
	seat, err := strconv.Atoi(pod.Annotations[AnnotationSeat])
	return seat, err == nil && seat > 0
}

// Source is where a strategy was found while walking a pod's ownership chain.
type Source struct {
	// Present is set when some object of the chain carries a strategy annotation.
	Present bool
	// Raw is the annotation value (possibly empty, which Parse reports as a fault).
	Raw string
	// Key is the annotation key it was read from.
	Key string
	// Object names the object that carried it, e.g. "pod" or "Deployment shop/web".
	Object string
	// Origin is the kind of link that carried it, for metrics (Object is unbounded).
	Origin Origin
	// Disabled is set when an object in the chain says UseCustomKubeScheduler: "false".
	Disabled bool
	// Warnings collects oddities worth telling the user (an unreadable opt-in value,
	// both spellings with different values).
	Warnings []string
}

// Active reports whether a strategy was found and is not switched off.
func (s Source) Active() bool { return s.Present && !s.Disabled }

// AnnotatedObject is one link of an ownership chain: a name for messages, its
// annotations and, for links that are not the pod's or its workloads' own, its Origin.
type AnnotatedObject struct {
	Name        string
	Annotations map[string]string
	// Origin is empty for the pod, its template and its workloads (OriginAnnotation).
	Origin Origin
}

// Origin is the kind of link a strategy came from: a small fixed set, so that metrics
// can carry it as a label.
type Origin string

// The origins of a strategy, in the order a chain is walked.
const (
	// OriginAnnotation: the pod's, its template's or one of its workloads' annotation.
	OriginAnnotation Origin = "annotation"
	// OriginPlacementPolicy: a PlacementPolicy of the workload's namespace.
	OriginPlacementPolicy Origin = "PlacementPolicy"
	// OriginClusterPlacementPolicy: a ClusterPlacementPolicy.
	OriginClusterPlacementPolicy Origin = "ClusterPlacementPolicy"
	// OriginNamespace: the namespace's default strategy annotation.
	OriginNamespace Origin = "Namespace"
)

// origin is o, with the empty value read as OriginAnnotation.
func (o Origin) origin() Origin {
	if o == "" {
		return OriginAnnotation
	}
	return o
}

// Find walks objects in order (the pod first, then its workload) and returns the first
// strategy found. An explicit UseCustomKubeScheduler "false" anywhere in the chain turns
// it off, so one switch on the Deployment disables it for every pod.
func Find(chain ...AnnotatedObject) Source {
	var src Source
	for _, obj := range chain {
		if v, ok := obj.Annotations[AnnotationOptIn]; ok {
			on, err := strconv.ParseBool(strings.TrimSpace(v))
			switch {
			case err != nil:
				src.Warnings = append(src.Warnings, fmt.Sprintf("%s: %s value %q is neither true nor false; ignored", obj.Name, AnnotationOptIn, v))
			case !on:
				src.Disabled = true
			}
		}
		if src.Present {
			continue
		}
		canonical, hasCanonical := obj.Annotations[AnnotationStrategy]
		alias, hasAlias := obj.Annotations[AnnotationStrategyAlias]
		switch {
		case hasCanonical:
			src.Present, src.Raw, src.Key, src.Object, src.Origin = true, canonical, AnnotationStrategy, obj.Name, obj.Origin.origin()
			if hasAlias && strings.TrimSpace(alias) != strings.TrimSpace(canonical) {
				src.Warnings = append(src.Warnings, fmt.Sprintf("%s: %s and %s differ; using %s", obj.Name, AnnotationStrategy, AnnotationStrategyAlias, AnnotationStrategy))
			}
		case hasAlias:
			src.Present, src.Raw, src.Key, src.Object, src.Origin = true, alias, AnnotationStrategyAlias, obj.Name, obj.Origin.origin()
		}
	}
	return src
}

// NotEnabled says that the namespace ns is not enabled for the webhook, so that nothing
// places the pods of what (a workload), and how to enable it.
func NotEnabled(ns, what string) string {
	return fmt.Sprintf("namespace %s is not enabled for custom-kube-scheduler-webhook, so nothing will place the pods of %s: "+
		"kubectl label namespace %s %s=true", ns, what, ns, LabelNamespaceEnabled)
}

// JobHeld says why the convergence loop moves none of a Job's pods ("": it may): the
// first link carrying AnnotationMoveJobPods decides, of the Job's own links (Origin
// empty: its pod template, itself, its CronJob) and source, the link its strategy came
// from; without one they stay. A policy that does not govern the Job does not decide.
func JobHeld(chain []AnnotatedObject, source string) string {
	for _, o := range chain {
		if o.Origin != "" && o.Name != source {
			continue
		}
		if v, ok := o.Annotations[AnnotationMoveJobPods]; ok {
			if strings.EqualFold(strings.TrimSpace(v), "true") {
				return ""
			}
			return fmt.Sprintf("a Job's pods are not moved: %s is %q on %s", AnnotationMoveJobPods, v, o.Name)
		}
	}
	return "a Job's pods are not moved (a killed batch pod loses its work; " + AnnotationMoveJobPods + `: "true" lets the loop move them)`
}

// Held says why the convergence loop moves none of a workload's pods, from its chain
// ("": it may): the converge annotation "false" on a link up to source, the link its
// strategy came from (links after it do not govern the workload). A policy carries it
// when suspended.
func Held(chain []AnnotatedObject, source string) string {
	for _, o := range chain {
		if v, ok := o.Annotations[AnnotationConverge]; ok && strings.EqualFold(strings.TrimSpace(v), "false") {
			if o.Origin == OriginPlacementPolicy || o.Origin == OriginClusterPlacementPolicy {
				return o.Name + " is suspended (spec.suspend)"
			}
			return fmt.Sprintf("%s is %q on %s", AnnotationConverge, "false", o.Name)
		}
		if o.Name == source {
			break
		}
	}
	return ""
}
