package placement

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
)

// decisionInput is everything the placement of one pod depends on, gathered by the
// admission handler beforehand: the pod, its workload and strategy, its seat, the terms
// unavailable now and what serves a term.
type decisionInput struct {
	Pod      *corev1.Pod
	Workload *clusterview.Workload
	Strategy *strategy.Strategy
	Seat     int
	// Unavailable holds the 0-based terms unavailable now, each with why (nil: none).
	Unavailable map[int]string
	// Capacity says what serves a term (nil: not asked).
	Capacity Capacity
	// Admission is the admission UID, recorded on the pod to end its seat reservation.
	Admission types.UID
	// Arch decides the architecture requirement of the pod on term i (nil: not asked).
	Arch func(i int, term strategy.Term) archVerdict
	// OnDemandAcceptsReserved widens a term's karpenter.sh/capacity-type=on-demand to
	// on-demand|reserved, as Karpenter advises, so reservations already paid for fill first.
	OnDemandAcceptsReserved bool
}

// decision is where a pod goes, or why it is left alone. Deciding has no side effects:
// the handler records the Events and metrics it names.
type decision struct {
	// Outcome is webhook.OutcomePlaced (Patch is set), webhook.OutcomeConflict or webhook.OutcomeError.
	Outcome string
	// Term is the 0-based term the pod goes to (placed, or refused for a conflict); -1
	// when its seat has no term.
	Term int
	// Patch is the JSON patch of a placed pod.
	Patch    []byte
	Warnings []string
	// Events to record on the workload, as reason and message.
	Events [][2]string
	// Unserved is set when nothing serves the term (counted in a metric).
	Unserved bool
	// Arch is the architecture step's verdict (its outcome is counted in a metric).
	Arch archVerdict
}

// decide places a pod on its seat's term (or, while that term is unavailable, on the
// fallback term), checks its nodeSelector for conflicts, asks what the term needs and
// builds the patch.
func decide(in decisionInput) decision {
	s, w, pod := in.Strategy, in.Workload, in.Pod
	d := decision{Term: -1}
	own, err := s.TermAt(in.Seat)
	if err != nil {
		d.Outcome, d.Warnings = webhook.OutcomeError, []string{fmt.Sprintf("pod not placed: %v", err)}
		return d
	}
	placed := fallbackOf(s, w, in.Seat, own, in.Unavailable)
	if placed.warning != "" {
		d.Warnings = append(d.Warnings, placed.warning)
	}
	index := placed.term
	d.Term = index
	term := s.Terms[index]
	selector := term.LabelMap()
	if in.OnDemandAcceptsReserved && selector[strategy.CapacityTypeLabel] == strategy.CapacityOnDemand {
		selector[strategy.CapacityTypeLabel] = strategy.CapacityOnDemand + strategy.SetSeparator + strategy.CapacityReserved
	}
	if conflicts := conflicting(pod.Spec.NodeSelector, selector); len(conflicts) > 0 {
		msg := fmt.Sprintf("pod not placed: its nodeSelector conflicts with term %d (%s) of %s: %s",
			index+1, term.LabelString(), w.Describe(), strings.Join(conflicts, ", "))
		d.Outcome = webhook.OutcomeConflict
		d.Warnings = append(d.Warnings, msg)
		d.Events = append(d.Events, [2]string{ReasonNodeSelectorConflict, msg})
		return d
	}

	var needed []corev1.Toleration
	if in.Capacity != nil {
		var served bool
		needed, served = in.Capacity.Tolerations(selector)
		if !served {
			msg := UnservedWarning(index, term, w.Describe(), "the pod")
			d.Unserved = true
			d.Warnings = append(d.Warnings, msg)
			d.Events = append(d.Events, [2]string{ReasonUnservedTerm, msg})
		}
	}

	annotations := map[string]string{
		strategy.AnnotationSeat: strconv.Itoa(in.Seat),
		strategy.AnnotationTerm: strconv.Itoa(index + 1),
	}
	if in.Arch != nil {
		// The pod keeps its seat even when the term cannot run its images: moving it
		// would change the split silently, while it is reported here, at apply time and
		// by spread (docs/architecture-aware-placement.md).
		d.Arch = in.Arch(index, term)
		if d.Arch.warning != "" {
			d.Warnings = append(d.Warnings, d.Arch.warning)
		}
		if msg := d.Arch.cannotRun; msg != "" {
			msg += "; the pod is placed on its seat and will not start there"
			d.Warnings = append(d.Warnings, msg)
			d.Events = append(d.Events, [2]string{reasonImageArchitecture, msg})
			annotations[strategy.AnnotationCannotRun] = d.Arch.cannotRun
		}
	}
	if placed.fallback {
		annotations[strategy.AnnotationFallbackFrom] = strconv.Itoa(placed.from + 1)
	}
	// Lowest cost goes first on scale-down: the highest seats leave, the survivors are
	// the target for the smaller count. StatefulSets already remove the highest ordinals;
	// the Job controller does not read the cost.
	if _, set := pod.Annotations[strategy.AnnotationDeletionCost]; !set && w.StatefulSet == nil && w.Job == nil {
		annotations[strategy.AnnotationDeletionCost] = strconv.Itoa(-in.Seat)
	}
	if _, own, _ := w.OwnSeat(pod); !own {
		// Whichever webhook replica sees the pod first ends the reservation.
		annotations[strategy.AnnotationReservation] = string(in.Admission)
	}
	patch, err := placementPatch(pod, selector, needed, d.Arch.require, annotations)
	if err != nil {
		d.Outcome = webhook.OutcomeError
		d.Warnings = append(d.Warnings, fmt.Sprintf("pod not placed: %v", err))
		return d
	}
	d.Outcome, d.Patch = webhook.OutcomePlaced, patch
	return d
}

// conflicting lists the keys the pod already selects with another value than want (or
// a value outside want's set).
func conflicting(have, want map[string]string) []string {
	var out []string
	for k, v := range want {
		if cur, ok := have[k]; ok && !strategy.AdmitsValue(k, v, cur) {
			out = append(out, fmt.Sprintf("%s is %q, the term wants %q", k, cur, v))
		}
	}
	sort.Strings(out)
	return out
}

// UnservedWarning says that term (0-based index i) of owner is served by no capacity,
// so that pods (who) may stay Pending: at admission and at apply time alike.
func UnservedWarning(i int, term strategy.Term, owner, who string) string {
	return fmt.Sprintf("term %d (%s) of %s is served by no NodePool, node group or Ready node; %s may stay Pending", i+1, term.LabelString(), owner, who)
}
