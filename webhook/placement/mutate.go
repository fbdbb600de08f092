package placement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
)

// Event reasons the webhook records on workloads.
const (
	ReasonInvalidStrategy      = "InvalidStrategy"
	ReasonNodeSelectorConflict = "NodeSelectorConflict"
	ReasonUnservedTerm         = "UnservedTerm"
)

// Capacity tells what serves a term's node labels.
type Capacity interface {
	// Tolerations returns the tolerations a pod selecting labels needs for the taints
	// of the NodePools and node groups that serve them, and whether anything,
	// including a Ready node, serves labels at all.
	Tolerations(labels map[string]string) (tolerations []corev1.Toleration, served bool)
}

// SeatLedger hands out the seats of workload revisions.
//
// Admissions of one ReplicaSet burst arrive concurrently and before any of the new pods
// is visible, so seats held by live pods are not enough: a ledger also keeps short-lived
// reservations for pods it admitted but has not seen yet.
type SeatLedger interface {
	// Claim returns the lowest seat of revision that no live pod holds and no other
	// admission has reserved, and reserves it for admission. Claiming again with the same
	// admission UID (the API server retrying a call) returns the same seat. replicas is
	// how many pods the revision's ReplicaSet wants (negative: unknown): reservations
	// beyond what it can be creating, whose pods have not shown up within a second, give
	// their seats to the claim (forged reviews, pods rejected after this webhook).
	Claim(ctx context.Context, revision clusterview.Revision, admission types.UID) (int, error)
	// Peek returns the seat Claim would hand out now, reserving nothing (dry-run).
	Peek(ctx context.Context, revision clusterview.Revision) (int, error)
	// Release gives back a seat claimed by admission whose pod will not carry it.
	Release(ctx context.Context, revision clusterview.Revision, admission types.UID)
}

// Settings are pod placement's knobs a user turns (ADMISSION_DEADLINE,
// ON_DEMAND_ACCEPTS_RESERVED, IMAGE_ARCHITECTURES, IMAGE_LOOKUP_BUDGET): serve reads
// them and hands them to the PodMutator.
type Settings struct {
	// Deadline bounds each admission (0: only the caller's context does). Set below the
	// webhook's timeoutSeconds: past it the pod is admitted unplaced with a warning,
	// instead of being worked on after the API server gave up and created it anyway.
	Deadline time.Duration
	// OnDemandAcceptsReserved patches a karpenter.sh/capacity-type=on-demand term as
	// "In [on-demand, reserved]" (docs/configuration.md).
	OnDemandAcceptsReserved bool
	// ImageArchitectures limits a pod to its images' architectures: serve makes the
	// image step (PodMutator.Images, and validation's) only with it, waiting for the
	// lookup at most ImageBudget (ImageArchitectures.Budget).
	ImageArchitectures bool
	ImageBudget        time.Duration
}

// PodMutator places new pods of workloads that carry a strategy: it picks the pod's
// seat, and patches the seat's term into the pod's nodeSelector and tolerations.
// A pod is never blocked: every fault admits it unchanged with a warning.
type PodMutator struct {
	Resolver   clusterview.WorkloadResolver
	Ledger     SeatLedger
	Capacity   Capacity             // optional
	Recorder   record.EventRecorder // optional
	Metrics    *webhook.Metrics
	Namespaces clusterview.NamespaceFilter
	// Synced is closed once the caches have synced; until then held seats are unknown,
	// so admissions wait for it (bounded by the API server's timeout).
	Synced <-chan struct{}
	Log    logrus.FieldLogger
	// Settings are the knobs a user turns (docs/configuration.md).
	Settings

	// Availability says which terms are unavailable, so their seats go to the fallback
	// (optional: without it every term is taken as available).
	Availability Availability
	// Images narrows kubernetes.io/arch to what the pod's images run on (nil: off).
	Images *ImageArchitectures

	strategies strategy.Resolver
}

// podAdmission is one pod's way through the mutating webhook: what each step found,
// and what the answer says (warnings) or leaves behind (Events, recorded once at the
// end from one place).
type podAdmission struct {
	req      *admissionv1.AdmissionRequest
	pod      *corev1.Pod
	owner    *metav1.OwnerReference
	w        *clusterview.Workload // nil until resolved
	origin   strategy.Origin       // where the strategy came from, once found
	warnings []string
	events   [][2]string // reason, message (Warning Events on the workload)
}

// Admit implements the mutating admission of pod CREATE requests.
func (m *PodMutator) Admit(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if m.Deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.Deadline)
		defer cancel()
	}
	a := &podAdmission{req: req}
	outcome, resp := m.admit(ctx, a)
	if a.w != nil && m.Recorder != nil && !isDryRun(req) { // dry-run requests leave no trace
		ref := a.w.Ref
		for _, e := range a.events {
			m.Recorder.Event(&ref, corev1.EventTypeWarning, e[0], e[1])
		}
	}
	m.Metrics.Admitted("mutate", outcome)
	return resp
}

// admit takes the pod through the steps: is it ours, its workload, its strategy, its
// seat and placement. Each step answers with an outcome and a response when it ends
// the admission.
func (m *PodMutator) admit(ctx context.Context, a *podAdmission) (string, *admissionv1.AdmissionResponse) {
	if outcome, resp := m.ours(a); resp != nil {
		return outcome, resp
	}
	if outcome, resp := m.resolve(ctx, a); resp != nil {
		return outcome, resp
	}
	s, outcome, resp := m.strategyOf(a)
	if resp != nil {
		return outcome, resp
	}
	return m.place(ctx, a, s)
}

// ours decodes the pod (unless the server did, see decodePodReview) and answers for
// every pod this webhook does not place: not a CREATE of a pod, a left-alone namespace,
// a mirror pod, a pod placed already, or one without a ReplicaSet, StatefulSet or Job.
func (m *PodMutator) ours(a *podAdmission) (string, *admissionv1.AdmissionResponse) {
	req := a.req
	// nodeSelector is immutable, so only CREATE of the pod itself is ours.
	if req.Operation != admissionv1.Create || req.Kind.Kind != "Pod" || req.SubResource != "" || m.Namespaces.Skip(req.Namespace) {
		return webhook.OutcomeSkipped, webhook.Allow()
	}
	pod, err := podOf(req)
	if err != nil {
		return webhook.OutcomeError, webhook.Allow(fmt.Sprintf("pod not placed: cannot read it: %v", err))
	}
	a.pod = pod
	if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return webhook.OutcomeSkipped, webhook.Allow()
	}
	if _, seated := pod.Annotations[strategy.AnnotationSeat]; seated {
		// Reinvocation or a pod copied from a placed one: placing it again would move it.
		return webhook.OutcomeSkipped, webhook.Allow()
	}
	owner := metav1.GetControllerOf(pod)
	switch {
	case owner != nil && owner.Kind == "DaemonSet":
		return webhook.OutcomeSkipped, webhook.Allow()
	case !clusterview.IsJob(owner) && (owner == nil || !strings.HasPrefix(owner.APIVersion, "apps/") || (owner.Kind != "ReplicaSet" && owner.Kind != "StatefulSet")):
		if !a.podStrategy().Active() {
			return webhook.OutcomeSkipped, webhook.Allow()
		}
		what := "a bare pod"
		if owner != nil {
			what = "a pod owned by a " + owner.Kind
		}
		return webhook.OutcomeSkipped, webhook.Allow(fmt.Sprintf("strategy ignored: %s has no Deployment, ReplicaSet, StatefulSet or Job to count seats in", what))
	}
	a.owner = owner
	return "", nil
}

// podOf returns the request's pod: decoded already by the server, or from the raw
// object (a request built by a caller of Admit).
func podOf(req *admissionv1.AdmissionRequest) (*corev1.Pod, error) {
	if pod, ok := req.Object.Object.(*corev1.Pod); ok {
		return pod, nil
	}
	pod := &corev1.Pod{}
	if err := json.Unmarshal(req.Object.Raw, pod); err != nil {
		return nil, err
	}
	return pod, nil
}

// podStrategy is where a strategy stands on the pod itself (its own annotations).
func (a *podAdmission) podStrategy() strategy.Source {
	return strategy.Find(strategy.AnnotatedObject{Name: "pod", Annotations: a.pod.Annotations})
}

// log returns the admission's logger. Fields are built only when a line is logged:
// most admissions log nothing, and building them was a fifth of an admission's
// allocations.
func (m *PodMutator) log(a *podAdmission) logrus.FieldLogger {
	fields := logrus.Fields{"namespace": a.req.Namespace, "owner": a.owner.Kind + "/" + a.owner.Name, "uid": a.req.UID}
	if a.w != nil {
		fields["workload"] = a.w.Describe()
	}
	return m.Log.WithFields(fields)
}

// resolve finds the pod's workload once the caches have synced.
func (m *PodMutator) resolve(ctx context.Context, a *podAdmission) (string, *admissionv1.AdmissionResponse) {
	if m.Synced != nil {
		select {
		case <-m.Synced:
		case <-ctx.Done():
			return webhook.OutcomeDeadline, webhook.Allow("pod not placed: the webhook's caches have not synced yet")
		}
	}
	w, err := m.Resolver.Resolve(ctx, a.req.Namespace, a.owner)
	if err != nil {
		m.log(a).WithError(err).Warn("cannot resolve the pod's workload; admitting it unchanged")
		// An unreadable owner (a ReplicaSet's Rollout) hides whether a strategy applies:
		// say so, as a pod's own strategy that cannot be followed is said.
		var owner *clusterview.OwnerError
		if a.podStrategy().Active() || ctx.Err() != nil || errors.As(err, &owner) {
			return pastDeadline(ctx, webhook.OutcomeError), webhook.Allow(fmt.Sprintf("pod not placed: %v", err))
		}
		return webhook.OutcomeError, webhook.Allow()
	}
	a.w = w
	return "", nil
}

// strategyOf finds the strategy that applies to the pod (its own annotations first,
// then its workload's) and parses it.
func (m *PodMutator) strategyOf(a *podAdmission) (*strategy.Strategy, string, *admissionv1.AdmissionResponse) {
	src := m.strategies.Resolve(append([]strategy.AnnotatedObject{{Name: "pod", Annotations: a.pod.Annotations}}, a.w.Chain...)...)
	a.warnings, a.origin = src.Warnings, src.Origin
	if !src.Active() {
		return nil, webhook.OutcomeSkipped, webhook.Allow(a.warnings...)
	}
	s, err := src.Strategy, src.Err
	if err != nil {
		msg := fmt.Sprintf("%s on %s is invalid, pod not placed: %v", src.Key, src.Object, err)
		a.events = append(a.events, [2]string{ReasonInvalidStrategy, msg})
		m.log(a).WithError(err).Info("invalid strategy; admitting the pod unchanged")
		return nil, webhook.OutcomeInvalid, webhook.Allow(append(a.warnings, msg)...)
	}
	for _, doubt := range s.Warnings {
		a.warnings = append(a.warnings, fmt.Sprintf("%s on %s: %s", src.Key, src.Object, doubt))
	}
	return s, "", nil
}

// place claims the pod's seat, decides its term and answers with the patch; a pod
// that is not placed gives its seat back.
func (m *PodMutator) place(ctx context.Context, a *podAdmission, s *strategy.Strategy) (string, *admissionv1.AdmissionResponse) {
	req, w := a.req, a.w
	seat, err := m.seat(ctx, req, w, a.pod)
	if err != nil {
		m.log(a).WithError(err).Warn("cannot pick a seat; admitting the pod unchanged")
		return pastDeadline(ctx, webhook.OutcomeError), webhook.Allow(append(a.warnings, fmt.Sprintf("pod not placed: %v", err))...)
	}
	var unavailable map[int]string
	if m.Availability != nil {
		unavailable = m.Availability.Unavailable(w.Revision)
	}
	in := decisionInput{Pod: a.pod, Workload: w, Strategy: s, Seat: seat, Unavailable: unavailable, Capacity: m.Capacity, Admission: req.UID,
		OnDemandAcceptsReserved: m.OnDemandAcceptsReserved}
	if m.Images != nil {
		in.Arch = func(i int, term strategy.Term) archVerdict {
			return m.Images.verdict(ctx, a.pod, req.Namespace, i, term, w.Describe())
		}
	}
	d := decide(in)
	a.warnings = append(a.warnings, d.Warnings...)
	a.events = append(a.events, d.Events...)
	if d.Unserved && !isDryRun(req) {
		m.Metrics.Unserved(s.Terms[d.Term].LabelString())
	}
	if d.Arch.outcome != "" && !isDryRun(req) {
		m.Metrics.Architecture(d.Arch.outcome)
	}
	if d.Outcome != webhook.OutcomePlaced {
		m.release(ctx, req, w, a.pod)
		return d.Outcome, webhook.Allow(a.warnings...)
	}
	if err := ctx.Err(); err != nil {
		// The API server has given up on this call (and, failing open, created the pod
		// unplaced) or is about to: do not hold a seat for a patch nobody applies.
		go func() {
			// Off the response path, so the answer is not delayed further.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			m.release(rctx, req, w, a.pod)
		}()
		m.log(a).WithError(err).Warn("admission deadline passed; admitting the pod unchanged")
		return webhook.OutcomeDeadline, webhook.Allow(append(a.warnings, fmt.Sprintf("pod not placed: the admission deadline passed (%v)", err))...)
	}
	term := s.Terms[d.Term]
	if !isDryRun(req) {
		m.Metrics.Placed(term.LabelString(), string(a.origin))
	}
	if debugEnabled(m.Log) {
		m.log(a).WithFields(logrus.Fields{"seat": seat, "term": d.Term + 1, "labels": term.LabelString(), "dryRun": isDryRun(req)}).Debug("pod placed")
	}
	resp := webhook.Allow(a.warnings...)
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = d.Patch, &pt
	return webhook.OutcomePlaced, resp
}

// debugEnabled reports whether log writes debug lines; loggers that cannot tell are
// taken to write them.
func debugEnabled(log logrus.FieldLogger) bool {
	switch l := log.(type) {
	case *logrus.Logger:
		return l.IsLevelEnabled(logrus.DebugLevel)
	case *logrus.Entry:
		return l.Logger.IsLevelEnabled(logrus.DebugLevel)
	}
	return true
}

// pastDeadline turns a failure caused by the admission's context ending into the
// deadline outcome, so it is counted apart from real faults.
func pastDeadline(ctx context.Context, outcome string) string {
	if ctx.Err() != nil {
		return webhook.OutcomeDeadline
	}
	return outcome
}

// seat picks the pod's seat: the ordinal for StatefulSet pods and the completion index
// for an Indexed Job's, otherwise the ledger's lowest free seat (only looked at, not
// reserved, on dry-run).
func (m *PodMutator) seat(ctx context.Context, req *admissionv1.AdmissionRequest, w *clusterview.Workload, pod *corev1.Pod) (int, error) {
	if seat, own, err := w.OwnSeat(pod); own {
		return seat, err
	}
	switch {
	case isDryRun(req):
		return m.Ledger.Peek(ctx, clusterview.Revision{Namespace: req.Namespace, UID: w.Revision})
	default:
		return m.Ledger.Claim(ctx, clusterview.Revision{Namespace: req.Namespace, UID: w.Revision}, req.UID)
	}
}

func (m *PodMutator) release(ctx context.Context, req *admissionv1.AdmissionRequest, w *clusterview.Workload, pod *corev1.Pod) {
	if _, own, _ := w.OwnSeat(pod); !own && !isDryRun(req) {
		m.Ledger.Release(ctx, clusterview.Revision{Namespace: req.Namespace, UID: w.Revision}, req.UID)
	}
}

func isDryRun(req *admissionv1.AdmissionRequest) bool { return req.DryRun != nil && *req.DryRun }
