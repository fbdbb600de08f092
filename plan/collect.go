package plan

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/unavailability"
)

// Options say what Collect reads besides NodePools and nodes.
type Options struct {
	// WebhookNamespace holds the convergence loop's unavailability records.
	WebhookNamespace string
	// Kind, Namespace and Name name the live workload the plan is for (a Deployment or
	// StatefulSet, e.g. the one in `-f deploy.yaml`); its pods per term count as
	// placed and its records say which terms are unavailable. Empty Name: none.
	Kind, Namespace, Name string
	// NodeGroups lists the EKS managed node groups; nil leaves them out.
	NodeGroups func(ctx context.Context) ([]nodegroups.Group, error)
	// Now is the time records are read at; time.Now when nil.
	Now func() time.Time
	// Policies are the live policies and namespace defaults (report.ReadPolicies), so a
	// live workload they govern counts its placed pods as spread does; nil: its own
	// annotations only.
	Policies report.Policies
}

// Collect reads what Compute needs from the cluster. Not being allowed to list
// NodePools is an error (there is no plan without them); what else cannot be read
// (nodes, node groups, the live workload, the records) is named in Capacity.Unseen.
// Placed is nil without a live workload.
func Collect(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, s *strategy.Strategy, o Options) (Capacity, []int, error) {
	var c Capacity
	pools, err := karpenter.ListNodePools(ctx, dyn)
	switch {
	case apierrors.IsForbidden(err):
		return c, nil, fmt.Errorf("not allowed to list NodePools (karpenter.sh/v1, cluster-wide): plan --cluster needs get and list on nodepools; without them run plan without --cluster: %w", err)
	case apierrors.IsNotFound(err):
		c.Unseen = append(c.Unseen, "NodePools (the karpenter.sh/v1 API is not served: Karpenter not installed?)")
	case err != nil:
		return c, nil, err
	}
	c.NodePools = pools
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	switch {
	case err == nil:
		c.Nodes = nodes.Items
	case apierrors.IsForbidden(err):
		c.Unseen = append(c.Unseen, "nodes (not allowed to list them): pods per node of node groups, and plain nodes serving a term")
	default:
		return c, nil, fmt.Errorf("list Nodes: %w", err)
	}
	if o.NodeGroups != nil {
		if c.NodeGroups, err = o.NodeGroups(ctx); err != nil {
			c.Unseen = append(c.Unseen, fmt.Sprintf("EKS managed node groups (%v)", err))
		}
	}
	if o.Name == "" {
		c.Unseen = append(c.Unseen, "the convergence loop's unavailability records (kept per workload revision: give -f with a live Deployment, StatefulSet, Rollout or Job to read its record)")
		return c, nil, nil
	}
	placed, err := live(ctx, client, dyn, s, o, &c)
	if err != nil {
		c.Unseen = append(c.Unseen, fmt.Sprintf("the live %s %s/%s (%s): nothing counted as placed", o.Kind, o.Namespace, o.Name, short(err)))
	}
	return c, placed, nil
}

// liveRollout reads Argo Rollout o.Name (metadata and selector) and its ReplicaSets
// into st, and returns its selector.
func liveRollout(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, o Options, st *report.State) (*metav1.LabelSelector, error) {
	u, err := dyn.Resource(report.RolloutResource).Namespace(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	raw, found, err := unstructured.NestedMap(u.Object, "spec", "selector")
	if err != nil || !found {
		return nil, fmt.Errorf("Rollout %s/%s has no spec.selector (%v)", o.Namespace, o.Name, err)
	}
	selector := &metav1.LabelSelector{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, selector); err != nil {
		return nil, fmt.Errorf("Rollout %s/%s: spec.selector: %w", o.Namespace, o.Name, err)
	}
	st.Rollouts = []metav1.ObjectMeta{{Namespace: u.GetNamespace(), Name: u.GetName(), UID: u.GetUID(), Labels: u.GetLabels(), Annotations: u.GetAnnotations()}}
	rs, err := client.AppsV1().ReplicaSets(o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(selector)})
	if err != nil {
		return nil, err
	}
	st.ReplicaSets = rs.Items
	return selector, nil
}

// live reads the live workload's pods per term and its unavailability record.
func live(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, s *strategy.Strategy, o Options, c *Capacity) ([]int, error) {
	st := &report.State{Nodes: map[string]*corev1.Node{}, Policies: o.Policies}
	apps := client.AppsV1()
	var selector *metav1.LabelSelector
	switch o.Kind {
	case "Rollout":
		var err error
		if selector, err = liveRollout(ctx, client, dyn, o, st); err != nil {
			return nil, err
		}
	case "Deployment":
		d, err := apps.Deployments(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		st.Deployments, selector = []appsv1.Deployment{*d}, d.Spec.Selector
		rs, err := apps.ReplicaSets(o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(selector)})
		if err != nil {
			return nil, err
		}
		st.ReplicaSets = rs.Items
	case "StatefulSet":
		ss, err := apps.StatefulSets(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		st.StatefulSets, selector = []appsv1.StatefulSet{*ss}, ss.Spec.Selector
	case "Job":
		j, err := client.BatchV1().Jobs(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		st.Jobs, selector = []batchv1.Job{*j}, j.Spec.Selector
		// A CronJob's Job finds its strategy on the CronJob too.
		if ref := metav1.GetControllerOf(j); ref != nil && ref.Kind == "CronJob" {
			cj, err := client.BatchV1().CronJobs(o.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("its CronJob %s: %w", ref.Name, err)
			}
			st.CronJobs = []batchv1.CronJob{*cj}
		}
	default:
		return nil, fmt.Errorf("kind %q: want Deployment, StatefulSet, Rollout or Job (a CronJob's pods are counted per Job: give -f with one of its Jobs)", o.Kind)
	}
	pods, err := client.CoreV1().Pods(o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(selector)})
	if err != nil {
		return nil, err
	}
	st.Pods = pods.Items
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	var recordErr error
	st.Unavailable = func(revision types.UID) map[int]unavailability.TermState {
		lease, err := client.CoordinationV1().Leases(o.WebhookNamespace).Get(ctx, unavailability.RecordName(revision), metav1.GetOptions{})
		if err != nil {
			if !apierrors.IsNotFound(err) {
				recordErr = err
			}
			return nil
		}
		rec, err := unavailability.DecodeRecord(lease)
		if err != nil {
			recordErr = err
			return nil
		}
		c.Unavailable = rec.Active(now())
		return c.Unavailable
	}
	r := report.Build(st, func(string, string) bool { return true })
	if recordErr != nil {
		c.Unseen = append(c.Unseen, fmt.Sprintf("the unavailability record in namespace %s (%s): every term is shown as available", o.WebhookNamespace, short(recordErr)))
	}
	if len(r.Workloads) != 1 || r.Workloads[0].Error != "" {
		return nil, fmt.Errorf("it carries no active %s", strategy.AnnotationStrategy)
	}
	w := r.Workloads[0]
	if w.Strategy != s.String() {
		if live, err := strategy.Parse(w.Strategy); err != nil || live.String() != s.String() {
			c.Unavailable = nil
			return nil, fmt.Errorf("it carries another strategy, %q", w.Strategy)
		}
	}
	placed := make([]int, len(w.Terms))
	for i, t := range w.Terms {
		placed[i] = t.Placed
	}
	return placed, nil
}

// short is an API error as Unseen shows it.
func short(err error) string {
	if apierrors.IsForbidden(err) {
		return "not allowed to read it"
	}
	if apierrors.IsNotFound(err) {
		return "not found"
	}
	return err.Error()
}
