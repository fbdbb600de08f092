package report

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/converge"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// Options say what Collect reports.
type Options struct {
	// Namespace of the workloads; metav1.NamespaceAll for every namespace.
	Namespace string
	// WebhookNamespace holds the convergence loop's unavailability records.
	WebhookNamespace string
	// Keep filters workloads by kind and name; nil keeps all.
	Keep func(kind, name string) bool
}

// Collect lists the workloads, pods, nodes, unavailability records and capacity from the
// API server and builds the report.
func Collect(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, o Options) (Report, error) {
	if o.Keep == nil {
		o.Keep = func(string, string) bool { return true }
	}
	ns := o.Namespace
	st := &State{Nodes: map[string]*corev1.Node{}}
	apps := client.AppsV1()
	deployments, err := apps.Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return Report{}, fmt.Errorf("list Deployments: %w", err)
	}
	statefulSets, err := apps.StatefulSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return Report{}, fmt.Errorf("list StatefulSets: %w", err)
	}
	replicaSets, err := apps.ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return Report{}, fmt.Errorf("list ReplicaSets: %w", err)
	}
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return Report{}, fmt.Errorf("list Pods: %w", err)
	}
	st.Deployments, st.StatefulSets, st.ReplicaSets, st.Pods = deployments.Items, statefulSets.Items, replicaSets.Items, pods.Items
	// Nodes, NodePools and the webhook's records are cluster-wide or elsewhere: a user who
	// may read only their namespace still gets the report, told what it lacks.
	var unseen []string
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	nodesSeen := err == nil
	switch {
	case apierrors.IsForbidden(err):
		unseen = append(unseen, "nodes (not allowed to list them): no node's capacity type, nothing shown as serving a term")
	case err != nil:
		return Report{}, fmt.Errorf("list Nodes: %w", err)
	default:
		for i := range nodes.Items {
			st.Nodes[nodes.Items[i].Name] = &nodes.Items[i]
		}
	}

	// Which terms the convergence loop found unavailable. Without the right to read
	// them (or with the loop off) every term counts as available.
	leases, err := client.CoordinationV1().Leases(o.WebhookNamespace).List(ctx, metav1.ListOptions{LabelSelector: strategy.LabelUnavailability + "=true"})
	if err != nil {
		unseen = append(unseen, fmt.Sprintf("unavailability records in namespace %s (%s): every term is shown as available", o.WebhookNamespace, reason(err)))
	} else {
		records := map[types.UID]*converge.Record{}
		for i := range leases.Items {
			if rec, err := converge.DecodeRecord(&leases.Items[i]); err == nil {
				records[rec.Revision] = rec
			}
		}
		now := time.Now()
		st.Unavailable = func(uid types.UID) map[int]converge.TermState { return records[uid].Active(now) }
	}

	// The same catalog the webhook uses says what serves each term. It watches nodes and
	// NodePools: without the right to list both it would never sync.
	_, err = dyn.Resource(karpenter.NodePoolGVR()).List(ctx, metav1.ListOptions{Limit: 1})
	poolsForbidden := apierrors.IsForbidden(err)
	if poolsForbidden {
		unseen = append(unseen, "NodePools (not allowed to list them): nothing is shown as serving a term")
	}
	if poolsForbidden || !nodesSeen {
		r := Build(st, o.Keep)
		r.Unseen = unseen
		return r, nil
	}
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	catalog, err := karpenter.NewCatalog(karpenter.Options{Kube: client, Dynamic: dyn, Log: quiet})
	if err != nil {
		return Report{}, fmt.Errorf("create capacity catalog: %w", err)
	}
	catalogCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go catalog.Run(catalogCtx)
	syncCtx, cancelSync := context.WithTimeout(ctx, 30*time.Second)
	defer cancelSync()
	if !cache.WaitForCacheSync(syncCtx.Done(), catalog.HasSynced) {
		unseen = append(unseen, "what serves each term (the NodePool and node caches did not sync within 30s)")
	} else {
		st.ServedBy = func(labels map[string]string) []string {
			var names []string
			for _, s := range catalog.Serving(labels) {
				names = append(names, s.String())
			}
			return names
		}
	}
	r := Build(st, o.Keep)
	r.Unseen = unseen
	return r, nil
}

// reason is the short form of an API error for Unseen.
func reason(err error) string {
	if apierrors.IsForbidden(err) {
		return "not allowed to list them"
	}
	return err.Error()
}
