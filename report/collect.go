package report

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/sirupsen/logrus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/unavailability"
)

// Options say what Collect reports.
type Options struct {
	// Namespace of the workloads; metav1.NamespaceAll for every namespace.
	Namespace string
	// WebhookNamespace holds the convergence loop's unavailability records.
	WebhookNamespace string
	// Keep filters workloads by kind and name; nil keeps all.
	Keep func(kind, name string) bool
	// SkipServing leaves out what serves each term: it needs a NodePool and node
	// watch for the call, which a caller that only counts pods and prices them (the
	// cost metrics of serve, every few minutes) need not pay.
	SkipServing bool
	// PodSelector narrows the pods listed (a label selector; empty: all). The cost
	// metrics list only placed pods (strategy.LabelManaged): pods without a seat are
	// on no term and cost no term anything.
	PodSelector string
	// WhatIf, when set, edits the live policies and namespace defaults as a what-if
	// would (`plan --cluster -f policy.yaml`): State.WhatIf.
	WhatIf func(live *policy.Index) *policy.Index
}

// Collect lists the workloads, pods, nodes, unavailability records and capacity from the
// API server and builds the report.
func Collect(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, o Options) (Report, error) {
	if o.Keep == nil {
		o.Keep = func(string, string) bool { return true }
	}
	st, err := listWorkloads(ctx, client, o.Namespace, o.PodSelector)
	if err != nil {
		return Report{}, err
	}
	rolloutsUnseen := readRollouts(ctx, client, dyn, o.Namespace, st)
	jobsUnseen, err := listJobs(ctx, client, o.Namespace, st)
	if err != nil {
		return Report{}, err
	}
	rolloutsUnseen = append(rolloutsUnseen, jobsUnseen...)
	// Nodes, NodePools and the webhook's records are cluster-wide or elsewhere: a user who
	// may read only their namespace still gets the report, told what it lacks.
	unseen, nodesSeen, err := listNodes(ctx, client, st)
	if err != nil {
		return Report{}, err
	}
	if nodesSeen {
		st.Used, err = ReadReservedUse(ctx, client, st.Nodes)
		switch {
		case apierrors.IsForbidden(err):
			unseen = append(unseen, "pods on reserved nodes (not allowed to list them in every namespace): no idle reserved capacity is shown")
		case err != nil:
			return Report{}, err
		}
	}
	unseen = append(unseen, rolloutsUnseen...)
	unseen = append(unseen, readRecords(ctx, client, o.WebhookNamespace, st)...)
	unseen = append(unseen, readClusterTiming(ctx, client, o.WebhookNamespace, st)...)
	policies, policyGaps := ReadPolicies(ctx, client, dyn, o.Namespace)
	st.Policies, st.Stopped = policies, policy.Stopped(policies.MovesOff, o.WebhookNamespace)
	if o.WhatIf != nil {
		st.WhatIf = o.WhatIf(policies)
	}
	unseen = append(unseen, policyGaps...)
	if !o.SkipServing {
		serving, err := readServing(ctx, client, dyn, nodesSeen, st)
		if err != nil {
			return Report{}, err
		}
		unseen = append(unseen, serving...)
	}
	r := Build(st, o.Keep)
	r.Stopped = st.Stopped("")
	scope, err := ReadScope(ctx, client)
	if err != nil {
		return Report{}, err
	}
	unseen = append(unseen, scope.Unseen...)
	told := map[string]bool{}
	for i := range r.Workloads {
		wl := &r.Workloads[i]
		if wl.State == StateAudit {
			continue // nothing places its pods, in scope or not
		}
		msg, why, err := scope.NotEnabled(ctx, wl.Namespace, fmt.Sprintf("%s %s/%s", wl.Kind, wl.Namespace, wl.Name))
		if err != nil {
			return Report{}, err
		}
		if why != "" && !told[why] {
			told[why] = true
			unseen = append(unseen, why)
		}
		if msg != "" {
			// Its pods are never sent to the webhook: whatever they show now, nothing
			// keeps the spread.
			wl.NotEnabled, wl.Exact = msg, false
			if wl.State != StateInvalid {
				wl.State, wl.Why = StateNotEnabled, msg
			}
		}
	}
	r.Unseen = unseen
	return r, nil
}

// listWorkloads lists the namespace's (all namespaces': "") workloads and the pods
// podSelector selects.
func listWorkloads(ctx context.Context, client kubernetes.Interface, ns, podSelector string) (*State, error) {
	st := &State{Nodes: map[string]*corev1.Node{}}
	apps := client.AppsV1()
	deployments, err := apps.Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list Deployments: %w", err)
	}
	statefulSets, err := apps.StatefulSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list StatefulSets: %w", err)
	}
	replicaSets, err := apps.ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list ReplicaSets: %w", err)
	}
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: podSelector})
	if err != nil {
		return nil, fmt.Errorf("list Pods: %w", err)
	}
	st.Deployments, st.StatefulSets, st.ReplicaSets, st.Pods = deployments.Items, statefulSets.Items, replicaSets.Items, pods.Items
	return st, nil
}

// listJobs reads the Jobs and CronJobs into st; a user not allowed to list them still
// gets the report of the other workloads, told what it lacks.
func listJobs(ctx context.Context, client kubernetes.Interface, ns string, st *State) (unseen []string, err error) {
	jobs, err := client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err == nil {
		var cronJobs *batchv1.CronJobList
		if cronJobs, err = client.BatchV1().CronJobs(ns).List(ctx, metav1.ListOptions{}); err == nil {
			st.Jobs, st.CronJobs = jobs.Items, cronJobs.Items
			return nil, nil
		}
	}
	if apierrors.IsForbidden(err) {
		return []string{"Jobs and CronJobs (not allowed to list them): no Job is reported"}, nil
	}
	return nil, fmt.Errorf("list Jobs and CronJobs: %w", err)
}

// listNodes reads the nodes into st; without the right to list them it says what the
// report lacks.
func listNodes(ctx context.Context, client kubernetes.Interface, st *State) (unseen []string, seen bool, err error) {
	nodes, err := ReadNodes(ctx, client)
	switch {
	case apierrors.IsForbidden(err):
		return []string{"nodes (not allowed to list them): no node's capacity type, nothing shown as serving a term, no idle reserved capacity"}, false, nil
	case err != nil:
		return nil, false, err
	}
	st.Nodes = nodes
	return nil, true, nil
}

// nodePageSize is how many Nodes one page of ReadNodes holds.
const nodePageSize = 500

// nodeLabels are the labels a report reads of a node: its capacity type, instance type
// and place (what prices it).
var nodeLabels = []string{karpv1.CapacityTypeLabelKey, nodegroups.LabelCapacityType, corev1.LabelInstanceTypeStable, corev1.LabelTopologyRegion, corev1.LabelTopologyZone}

// ReadNodes lists the nodes by name, in pages, each node trimmed to what a report reads
// of it (its name, nodeLabels, allocatable CPU, memory and pods) before the next page
// is read: a Node's status (images, conditions) is most of it, and serve's cost refresh
// reads every node at each interval. A reserved node keeps all its labels, and whether
// it takes pods (cordoned, Karpenter's disrupted taint): idle room on it is matched
// against a term's labels, and reserved nodes are few.
func ReadNodes(ctx context.Context, client kubernetes.Interface) (map[string]*corev1.Node, error) {
	out := map[string]*corev1.Node{}
	opts := metav1.ListOptions{Limit: nodePageSize}
	for {
		page, err := client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list Nodes (%d listed): %w", len(out), err)
		}
		for i := range page.Items {
			n := &page.Items[i]
			slim := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}
			for _, k := range nodeLabels {
				if v, ok := n.Labels[k]; ok {
					if slim.Labels == nil {
						slim.Labels = map[string]string{}
					}
					slim.Labels[k] = v
				}
			}
			slim.Status.Allocatable = corev1.ResourceList{}
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods} {
				if q, ok := n.Status.Allocatable[r]; ok {
					slim.Status.Allocatable[r] = q.DeepCopy()
				}
			}
			if pricing.NormalizeCapacityType(capacityType(n)) == pricing.Reserved {
				slim.Labels, slim.Spec.Unschedulable, slim.Spec.Taints = n.Labels, n.Spec.Unschedulable, n.Spec.Taints
			}
			out[n.Name] = slim
		}
		if page.Continue == "" {
			return out, nil
		}
		opts.Continue = page.Continue
	}
}

// readRecords reads which terms the convergence loop found unavailable. Without the
// right to read them (or with the loop off) every term counts as available.
func readRecords(ctx context.Context, client kubernetes.Interface, webhookNamespace string, st *State) (unseen []string) {
	leases, err := client.CoordinationV1().Leases(webhookNamespace).List(ctx, metav1.ListOptions{LabelSelector: strategy.LabelUnavailability + "=true"})
	if err != nil {
		return []string{fmt.Sprintf("unavailability records in namespace %s (%s): every term is shown as available", webhookNamespace, reason(err))}
	}
	records := map[types.UID]*unavailability.Record{}
	for i := range leases.Items {
		if rec, err := unavailability.DecodeRecord(&leases.Items[i]); err == nil {
			records[rec.Revision] = rec
		}
	}
	now := time.Now()
	st.Unavailable = func(uid types.UID) map[int]unavailability.TermState { return records[uid].Active(now) }
	return nil
}

// readClusterTiming reads the cluster's move window (MOVE_WINDOW, as the chart sets it
// on the webhook's Deployment) and ON_DEMAND_ACCEPTS_RESERVED into st; without the
// right to read them it says so.
func readClusterTiming(ctx context.Context, client kubernetes.Interface, webhookNamespace string, st *State) (unseen []string) {
	list, err := client.AppsV1().Deployments(webhookNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{fmt.Sprintf("Deployments in namespace %s (%s): a move window set by the cluster's MOVE_WINDOW is not shown", webhookNamespace, reason(err))}
	}
	for _, d := range list.Items {
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				switch e.Name {
				case "MOVE_WINDOW":
					// The webhook refuses to start on an invalid one: no workload waits on it.
					st.Timing.Window, _ = strategy.ParseWindow(e.Value)
				case "ON_DEMAND_ACCEPTS_RESERVED":
					st.OnDemandAcceptsReserved = e.Value == "on" || e.Value == "true"
				}
			}
		}
	}
	return nil
}

// ReadPolicies lists the policies and namespaces into an Index, so workloads without a
// strategy of their own show their policy's or namespace default's; unseen says what it
// could not read. The policy API may not be served (CRDs not installed: no policies), or
// the user may not list namespaces (then only namespace ns is read).
func ReadPolicies(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, ns string) (_ *policy.Index, unseen []string) {
	var namespaced []v1alpha1.PlacementPolicy
	var cluster []v1alpha1.ClusterPlacementPolicy
	list := func(res dynamic.ResourceInterface, what string, each func(u map[string]any) error) {
		l, err := res.List(ctx, metav1.ListOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			unseen = append(unseen, fmt.Sprintf("%s (%s): their workloads are not shown", what, reason(err)))
		default:
			for i := range l.Items {
				if err := each(l.Items[i].Object); err != nil {
					unseen = append(unseen, fmt.Sprintf("%s %s: %v", what, l.Items[i].GetName(), err))
				}
			}
		}
	}
	list(dyn.Resource(v1alpha1.PlacementPolicies).Namespace(ns), "PlacementPolicies", func(u map[string]any) error {
		var p v1alpha1.PlacementPolicy
		err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, &p)
		namespaced = append(namespaced, p)
		return err
	})
	list(dyn.Resource(v1alpha1.ClusterPlacementPolicies), "ClusterPlacementPolicies", func(u map[string]any) error {
		var p v1alpha1.ClusterPlacementPolicy
		err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, &p)
		cluster = append(cluster, p)
		return err
	})
	var namespaces []corev1.Namespace
	nsList, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	switch {
	case err == nil:
		namespaces = nsList.Items
	case ns != metav1.NamespaceAll:
		if one, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil {
			namespaces = append(namespaces, *one)
		} else {
			unseen = append(unseen, fmt.Sprintf("namespace %s (%s): no namespace default, no ClusterPlacementPolicy namespaceSelector", ns, reason(err)))
		}
	default:
		unseen = append(unseen, fmt.Sprintf("namespaces (%s): no namespace defaults, no ClusterPlacementPolicy namespaceSelector", reason(err)))
	}
	return policy.NewIndex(namespaced, cluster, namespaces), unseen
}

// readServing has the catalog the webhook uses say what serves each term. It watches
// nodes and NodePools: without the right to list both it would never sync.
func readServing(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, nodesSeen bool, st *State) (unseen []string, err error) {
	_, err = dyn.Resource(karpenter.NodePoolGVR()).List(ctx, metav1.ListOptions{Limit: 1})
	poolsForbidden := apierrors.IsForbidden(err)
	if poolsForbidden {
		unseen = append(unseen, "NodePools (not allowed to list them): nothing is shown as serving a term")
	}
	if poolsForbidden || !nodesSeen {
		return unseen, nil
	}
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	catalog, err := karpenter.NewCatalog(karpenter.Options{Kube: client, Dynamic: dyn, Log: quiet})
	if err != nil {
		return nil, fmt.Errorf("create capacity catalog: %w", err)
	}
	catalogCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go catalog.Run(catalogCtx)
	syncCtx, cancelSync := context.WithTimeout(ctx, 30*time.Second)
	defer cancelSync()
	if !cache.WaitForCacheSync(syncCtx.Done(), catalog.HasSynced) {
		return append(unseen, "what serves each term (the NodePool and node caches did not sync within 30s)"), nil
	}
	st.ServedBy = func(labels map[string]string) []string {
		var names []string
		for _, s := range catalog.Serving(labels) {
			names = append(names, s.String())
		}
		return names
	}
	st.Hint = catalog.Hint
	return unseen, nil
}

// reason is the short form of an API error for Unseen.
func reason(err error) string {
	if apierrors.IsForbidden(err) {
		return "not allowed to list them"
	}
	return err.Error()
}
