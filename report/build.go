package report

// Build: the Report of what the API server listed (State), each workload judged by
// strategy.Judge.

import (
	"slices"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/unavailability"
)

// State is what a report is computed from, as listed from the API server.
type State struct {
	Deployments  []appsv1.Deployment
	StatefulSets []appsv1.StatefulSet
	ReplicaSets  []appsv1.ReplicaSet
	// Jobs are reported while they run (a finished one holds no seat); a CronJob's Job
	// takes the CronJob's annotations and, for policies, its kind and labels.
	Jobs     []batchv1.Job
	CronJobs []batchv1.CronJob
	// Rollouts holds the metadata of Argo Rollouts (nil when not served): their
	// ReplicaSets are reported under them, as the webhook places them.
	Rollouts []metav1.ObjectMeta
	// RolloutSpecs holds a Rollout's replicas and pod template annotations by UID, read
	// for one that has no ReplicaSet yet (nil: unknown).
	RolloutSpecs map[types.UID]RolloutSpec
	Pods         []corev1.Pod
	// PodsOf, when set, is read instead of Pods: it calls fn with each pod of the
	// namespace whose controller is owner, on a term of s (nil: the term is not read).
	// serve's cost metrics read its pod cache so, instead of listing every pod and
	// holding them all.
	PodsOf func(namespace string, owner types.UID, s *strategy.Strategy, fn func(Pod))
	Nodes  map[string]*corev1.Node
	// Used is what the pods bound to each reserved node request (ReadReservedUse);
	// nil: not read, and no term shows idle reserved capacity.
	Used map[string]NodeUse
	// OnDemandAcceptsReserved is the webhook's ON_DEMAND_ACCEPTS_RESERVED: its
	// karpenter.sh/capacity-type=on-demand terms accept reserved capacity.
	OnDemandAcceptsReserved bool
	// ServedBy names the capacity serving a term's labels; nil leaves it out.
	ServedBy func(labels map[string]string) []string
	// Hint names, for a term nothing serves, the likely typo in its labels
	// (karpenter.Catalog.Hint); nil: not said.
	Hint func(labels map[string]string) (hint string, likely bool)
	// Unavailable returns the terms of a revision (ReplicaSet or StatefulSet UID)
	// unavailable now, from the convergence loop's records; nil when unknown.
	Unavailable func(revision types.UID) map[int]unavailability.TermState
	// Policies gives workloads without a strategy of their own their policy's or
	// namespace default's (nil: none).
	Policies Policies
	// Stopped says why the loop's moves in a namespace are stopped (policy.Stopped; nil:
	// not known).
	Stopped func(ns string) string
	// WhatIf, when set, are the policies and namespace defaults as a what-if would have
	// them (`plan --cluster -f policy.yaml`): each workload whose source or strategy
	// they change gets WorkloadReport.WhatIf.
	WhatIf Policies
	// Timing is the cluster's move timing (the webhook's MOVE_WINDOW): workloads whose
	// chain sets none of their own have it.
	Timing strategy.Timing
}

// Build computes the report for every workload in st that carries an active strategy;
// only names the workload filter keeps are reported.
func Build(st *State, keep func(kind, name string) bool) Report {
	podsByOwner := st.podsOf()
	objs := clusterview.Objects{Deployments: pointers(st.Deployments), StatefulSets: pointers(st.StatefulSets),
		ReplicaSets: pointers(st.ReplicaSets), Rollouts: pointers(st.Rollouts), Jobs: pointers(st.Jobs), CronJobs: pointers(st.CronJobs)}
	var report Report
	for _, v := range clusterview.Views(objs) {
		if !keep(v.Kind, v.Meta.Name) {
			continue
		}
		if v.Kind == "Rollout" && v.Current == nil {
			report.addRolloutWithoutReplicaSet(st, &v.Meta, podsByOwner)
			continue
		}
		// A Deployment's or Rollout's current ReplicaSet is counted, for the workload's
		// replicas (each of a Rollout's ReplicaSets is a seat sequence of its own); the
		// others' pods are a total.
		report.add(st, &v, podsByOwner, countPods(podsByOwner, v.Older))
	}
	sort.Slice(report.Workloads, func(i, j int) bool {
		a, b := report.Workloads[i], report.Workloads[j]
		return a.Namespace+"/"+a.Kind+"/"+a.Name < b.Namespace+"/"+b.Kind+"/"+b.Name
	})
	return report
}

// pointers points at each element of s.
func pointers[T any](s []T) []*T {
	out := make([]*T, len(s))
	for i := range s {
		out[i] = &s[i]
	}
	return out
}

// eachPod calls fn with each pod that holds a seat of the namespace whose controller
// is owner, on a term of s (nil: the term is not read).
type eachPod func(namespace string, owner types.UID, s *strategy.Strategy, fn func(Pod))

// podsOf is how Build reads the pods that hold a seat: PodsOf, or an index of Pods.
func (st *State) podsOf() eachPod {
	if st.PodsOf != nil {
		return func(namespace string, owner types.UID, s *strategy.Strategy, fn func(Pod)) {
			st.PodsOf(namespace, owner, s, func(p Pod) {
				if p.HoldsSeat {
					fn(p)
				}
			})
		}
	}
	byOwner := map[types.UID][]*corev1.Pod{}
	for i := range st.Pods {
		pod := &st.Pods[i]
		if ref := metav1.GetControllerOf(pod); ref != nil && strategy.HoldsSeat(pod) {
			byOwner[ref.UID] = append(byOwner[ref.UID], pod)
		}
	}
	return func(_ string, owner types.UID, s *strategy.Strategy, fn func(Pod)) {
		for _, p := range byOwner[owner] {
			fn(PodOf(p, s))
		}
	}
}

// countPods counts the pods of the ReplicaSets sets.
func countPods(pods eachPod, sets []*appsv1.ReplicaSet) int {
	n := 0
	for _, rs := range sets {
		pods(rs.Namespace, rs.UID, nil, func(Pod) { n++ })
	}
	return n
}

// add reports the workload v, whose other revisions hold older pods.
func (r *Report) add(st *State, v *clusterview.WorkloadView, pods eachPod, older int) {
	r.addAs(st, v.Policy(), v.Kind, v.Meta, v.Links(), v.Replicas, v.RevisionName, v.Revision, pods, older)
}

// addAs reports one workload whose strategy links are own (its own first, as the
// webhook's chain has them); pw is what policies select on (a CronJob's Job is selected
// as its CronJob).
func (r *Report) addAs(st *State, pw policy.Workload, kind string, meta metav1.ObjectMeta, own []strategy.AnnotatedObject, replicas *int32, revision string, uid types.UID, pods eachPod, older int) {
	chain := own
	var audited strategy.Resolved
	if st.Policies != nil {
		chain = st.Policies.AppendLinks(own, pw)
		// Resolved again only when an audited source joins the chain: resolving parses
		// the strategy, which every workload of a cost refresh would pay for nothing.
		if auditChain := st.Policies.AppendAuditLinks(slices.Clip(own), pw); !sameLinks(auditChain, chain) {
			audited = strategy.Resolve(auditChain...)
		}
	}
	src := strategy.Resolve(chain...)
	auditing := audited.Active() && audited.Object != src.Object
	var thenChain []strategy.AnnotatedObject
	var then strategy.Resolved
	if st.WhatIf != nil {
		thenChain = st.WhatIf.AppendLinks(slices.Clip(own), pw)
		then = strategy.Resolve(thenChain...)
	}
	changes := st.WhatIf != nil && (then.Object != src.Object || then.Raw != src.Raw)
	if !src.Active() && !auditing && !changes {
		return
	}
	w := WorkloadReport{Kind: kind, Namespace: meta.Namespace, Name: meta.Name, Replicas: 1, Revision: revision, Strategy: src.Raw, Source: src.Object, OtherRevisions: older}
	if replicas != nil {
		w.Replicas = int(*replicas)
	}
	if auditing {
		w.Audit = auditOf(audited, w.Replicas, uid, meta.Namespace, pods)
	}
	if changes {
		w.WhatIf = whatIfOf(st, then, thenChain, w.Replicas, uid, meta.Namespace, pods)
	}
	w.Held = strategy.Held(chain, src.Object)
	if w.Held == "" && kind == "Job" {
		w.Held = strategy.JobHeld(chain, src.Object) // as the loop holds it
	}
	if w.Held == "" && st.Stopped != nil {
		w.Held = st.Stopped(meta.Namespace)
	}
	if !src.Active() {
		w.State, w.Exact, w.Held, w.Why = StateNone, true, "", "no strategy applies now"
		if auditing {
			w.State, w.Why = StateAudit, "no strategy applies now: "+w.Audit.Source+" is in audit mode"
		}
		r.Workloads = append(r.Workloads, w)
		return
	}
	s, err := src.Strategy, src.Err
	if err != nil {
		w.Error = err.Error()
		w.State, w.Why = StateInvalid, "invalid strategy: "+w.Error
		r.Workloads = append(r.Workloads, w)
		return
	}
	var unavailable map[int]unavailability.TermState
	if st.Unavailable != nil && uid != "" {
		unavailable = st.Unavailable(uid)
	}
	placement := s.Place(w.Replicas, func(t int) bool { _, ok := unavailable[t]; return ok })
	w.Terms = termRows(st, s, s.Target(w.Replicas), placement.Counts(len(s.Terms)), unavailable)
	t := tally{nodes: make([]map[string]int, len(s.Terms)), requested: make([]map[string]requests, len(s.Terms)), size: make([]requests, len(s.Terms)),
		held: map[int]bool{}, judged: strategy.NewTally(w.Replicas, len(s.Terms))}
	for i := range s.Terms {
		t.nodes[i], t.requested[i] = map[string]int{}, map[string]requests{}
	}
	if uid != "" {
		pods(meta.Namespace, uid, s, func(pod Pod) { w.count(s, placement, pod, &t) })
	}
	w.finish(st, s, &t, unavailable)
	w.timing(strategy.TimingOf(chain, src.Object, st.Timing), time.Now())
	r.Workloads = append(r.Workloads, w)
}

// timing says the workload's move window and, while repairs are pending outside it,
// that its non-urgent moves wait (as the loop's ConvergeBlocked Event says).
func (w *WorkloadReport) timing(t strategy.Timing, now time.Time) {
	if t.Window != nil {
		w.MoveWindow = t.Window.String()
	}
	if why := t.Waits(now); why != "" && w.PendingRepairs > 0 && w.Held == "" {
		w.Waits = "non-urgent " + why
	}
}

// sameLinks reports whether a and b name the same objects in the same order.
func sameLinks(a, b []strategy.AnnotatedObject) bool {
	return slices.EqualFunc(a, b, func(x, y strategy.AnnotatedObject) bool { return x.Name == y.Name })
}

// auditOf is what the audited source src would do to the revision uid of replicas pods.
func auditOf(src strategy.Resolved, replicas int, uid types.UID, namespace string, pods eachPod) *AuditReport {
	a := &AuditReport{Source: src.Object, Strategy: src.Raw}
	if src.Err != nil {
		a.Error = src.Err.Error()
		return a
	}
	a.Target = src.Strategy.Target(replicas)
	var held []strategy.SeatTerm
	var names, unplaced []string
	if uid != "" {
		pods(namespace, uid, src.Strategy, func(p Pod) {
			switch {
			case p.Seat > 0 || p.DoNotDisrupt && p.HoldsSeat:
				// Placed, or unplaced and staying: Moving counts the seat it leaves free.
				held = append(held, strategy.SeatTerm{Seat: p.Seat, Term: p.TermIndex, Stays: p.DoNotDisrupt})
				names = append(names, p.Name)
			default:
				unplaced = append(unplaced, p.Name)
			}
		})
	}
	off, free := strategy.Moving(src.Strategy, replicas, held)
	a.WouldMove = len(off) + free
	for _, i := range off {
		a.Pods = append(a.Pods, names[i])
	}
	sort.Strings(a.Pods)
	sort.Strings(unplaced)
	a.Pods = append(a.Pods, unplaced[:min(free, len(unplaced))]...)
	return a
}

// whatIfOf is what the what-if's source then would do to the revision uid of replicas
// pods (then resolved from chain; not active: no strategy, its pods stay where they are).
func whatIfOf(st *State, then strategy.Resolved, chain []strategy.AnnotatedObject, replicas int, uid types.UID, namespace string, pods eachPod) *AuditReport {
	if !then.Active() {
		return &AuditReport{}
	}
	a := auditOf(then, replicas, uid, namespace, pods)
	a.Held = strategy.Held(chain, then.Object)
	if a.Held == "" && st.Stopped != nil {
		a.Held = st.Stopped(namespace)
	}
	return a
}

// termRows are a workload's term rows before its pods are counted.
func termRows(st *State, s *strategy.Strategy, target, expected []int, unavailable map[int]unavailability.TermState) []TermReport {
	rows := make([]TermReport, 0, len(s.Terms))
	for i, t := range s.Terms {
		row := TermReport{Term: i + 1, Labels: t.LabelMap(), Target: target[i], Expected: expected[i], ServedBy: []string{}, Nodes: []NodeReport{}}
		if u, ok := unavailable[i]; ok {
			row.UnavailableUntil, row.UnavailableReason = u.Until.UTC().Format(time.RFC3339), u.Reason
		}
		if st.ServedBy != nil {
			row.ServedBy = st.ServedBy(t.LabelMap())
		}
		rows = append(rows, row)
	}
	return rows
}

// tally is what counting a workload's pods gathers beside its rows: per term the pods
// on each node and what they request there, the seats held, the pods above the
// replica count.
type tally struct {
	nodes     []map[string]int
	requested []map[string]requests
	held      map[int]bool
	above     int
	// unplacedStaying counts the unplaced pods that carry do-not-disrupt.
	unplacedStaying int
	// judged is the tally strategy.Judge reads.
	judged strategy.Tally
	// size is the largest requests of one pod of each term: what idle room must hold.
	size []requests
}

// count adds one pod of the workload to its term's row, and to the tally Judge reads
// (strategy.Tally.Add, as the loop and the policy status count).
func (w *WorkloadReport) count(s *strategy.Strategy, placement strategy.Placement, pod Pod, t *tally) {
	t.judged.Add(pod.Live())
	i := pod.TermIndex
	if pod.Seat <= 0 || i < 0 || i >= len(s.Terms) {
		w.Unplaced++
		if pod.DoNotDisrupt {
			t.unplacedStaying++
		}
		return
	}
	if from := pod.FallbackFrom; from >= 1 && from <= len(s.Terms) && from-1 != i {
		w.Terms[from-1].FallbackPods++
	}
	if seat := pod.Seat; seat > 0 {
		t.held[seat] = true
		switch {
		case (seat > w.Replicas || placement.Terms[seat-1] != i) && pod.DoNotDisrupt:
			w.DoNotDisrupt++
		case seat > w.Replicas:
			t.above++
		case placement.Terms[seat-1] != i:
			w.PendingRepairs++
		}
	}
	row := &w.Terms[i]
	row.Placed++
	if why := pod.CannotRun; why != "" {
		row.CannotRun++
		if row.CannotRunReason == "" {
			row.CannotRunReason = why
		}
	}
	switch pod.Phase {
	case corev1.PodRunning:
		row.Running++
	case corev1.PodPending:
		row.Pending++
		if reason := pod.PendingReason; reason != "" && !slices.Contains(row.PendingReasons, reason) {
			row.PendingReasons = append(row.PendingReasons, reason)
		}
	}
	t.size[i].cpuMilli, t.size[i].memoryBytes = max(t.size[i].cpuMilli, pod.CPUMilli), max(t.size[i].memoryBytes, pod.MemoryBytes)
	if pod.NodeName != "" {
		t.nodes[i][pod.NodeName]++
		r := t.requested[i][pod.NodeName]
		r.cpuMilli += pod.CPUMilli
		r.memoryBytes += pod.MemoryBytes
		t.requested[i][pod.NodeName] = r
	}
}

// finish counts the repairs pending and the verdict (strategy.Judge), and lists each
// term's nodes.
func (w *WorkloadReport) finish(st *State, s *strategy.Strategy, t *tally, unavailable map[int]unavailability.TermState) {
	free := 0
	for seat := 1; seat <= w.Replicas; seat++ {
		if !t.held[seat] {
			free++
		}
	}
	w.PendingRepairs += w.Unplaced - t.unplacedStaying + min(t.above, free)
	w.DoNotDisrupt += t.unplacedStaying
	for i := range w.Terms {
		row := &w.Terms[i]
		onDemand := 0
		for name, count := range t.nodes[i] {
			n := nodeReport(st.Nodes[name], name, count, t.requested[i][name].list())
			switch pricing.NormalizeCapacityType(n.CapacityType) {
			case pricing.Reserved:
				row.ReservedPods += count
			case pricing.OnDemand:
				onDemand += count
			}
			row.Nodes = append(row.Nodes, n)
		}
		row.IdleReserved = idleReserved(st, s.Terms[i], t.size[i], onDemand)
		sort.Slice(row.Nodes, func(a, b int) bool { return row.Nodes[a].Name < row.Nodes[b].Name })
	}
	c := strategy.Conditions{Unavailable: func(i int) (string, bool) { u, ok := unavailable[i]; return u.Reason, ok }}
	if st.ServedBy != nil {
		c.Unserved = func(i int) (string, bool) {
			if len(w.Terms[i].ServedBy) > 0 {
				return "", false
			}
			if st.Hint == nil {
				return "", true
			}
			hint, _ := st.Hint(w.Terms[i].Labels)
			return hint, true
		}
	}
	v := strategy.Judge(s, t.judged, c)
	w.State, w.Why, w.Exact = string(v.State), v.Why, v.Exact()
}

// The states of a workload beside strategy.Judge's.
const (
	// StateNotEnabled: the API server does not send the workload's pods to the webhook.
	StateNotEnabled = "not-enabled"
	// StateInvalid: the strategy does not parse.
	StateInvalid = "invalid"
	// StateAudit: no strategy applies; only a source in audit mode would govern the
	// workload (Audit says what it would do). Nothing is off: spread exits 0 for it.
	StateAudit = "audit"
	// StateNone: no strategy applies now; reported only by a what-if (State.WhatIf),
	// for a workload it would give one.
	StateNone = "none"
)

// pendingReason is the scheduler's word on a pending pod, if it said anything.
func pendingReason(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return strings.TrimSpace(c.Reason + ": " + c.Message)
		}
	}
	return ""
}

// capacityType reads a node's capacity type from Karpenter's or EKS's label.
func capacityType(n *corev1.Node) string {
	if n == nil {
		return ""
	}
	if v, ok := n.Labels[karpv1.CapacityTypeLabelKey]; ok {
		return v
	}
	return strings.ToLower(strings.ReplaceAll(n.Labels[nodegroups.LabelCapacityType], "_", "-"))
}
