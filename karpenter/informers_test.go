package karpenter

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// The Node list is read in pages from one consistent snapshot, each Node slimmed: the
// image list, the largest part of an EKS node, is never kept.
func TestNodeListIsPagedAndSlim(t *testing.T) {
	const n = nodePageSize + 3
	client := fake.NewClientset()
	var pages []metav1.ListOptions
	client.PrependReactor("list", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		opts := a.(k8stesting.ListActionImpl).ListOptions
		pages = append(pages, opts)
		from, _ := strconv.Atoi(opts.Continue)
		to := min(n, from+int(opts.Limit))
		list := &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "9"}}
		for i := from; i < to; i++ {
			list.Items = append(list.Items, corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i), Labels: map[string]string{"pool": "a"}},
				Status:     corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"registry.example/app:1"}, SizeBytes: 1 << 20}}},
			})
		}
		if to < n {
			list.Continue = strconv.Itoa(to)
		}
		return true, list, nil
	})
	list, err := listSlimNodes(context.Background(), client, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != n || list.ResourceVersion != "9" {
		t.Fatalf("%d nodes at resource version %q, want %d at 9", len(list.Items), list.ResourceVersion, n)
	}
	if len(pages) != 2 || pages[0].Limit != nodePageSize || pages[0].ResourceVersion != "" {
		t.Errorf("pages asked %+v, want 2 of %d from one consistent snapshot", pages, nodePageSize)
	}
	for _, node := range list.Items {
		if len(node.Status.Images) != 0 || node.Labels["pool"] != "a" {
			t.Fatalf("node %s kept images %v, labels %v", node.Name, node.Status.Images, node.Labels)
		}
	}
}

// The catalog's Node watch answers which node an instance is, by spec.providerID, and
// keeps the providerID in its slim copy; a providerID set later moves the node into the
// index, a deleted node leaves it.
func TestNodeByInstance(t *testing.T) {
	aws := node("aws-1", true, map[string]string{"pool": "a"})
	aws.Spec.ProviderID = "aws:///eu-west-1a/i-0123456789abcdef0"
	kwok := node("kwok-1", false, map[string]string{"pool": "b"})
	kwok.Spec.ProviderID = "kwok://kwok-1"
	bare := node("bare", true, nil)
	client := fake.NewClientset(aws, kwok, bare)
	// The fake's watch replays nothing: the changes below are made once it watches.
	watching := make(chan struct{})
	var once sync.Once
	client.PrependWatchReactor("nodes", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := client.Tracker().Watch(a.GetResource(), a.GetNamespace(), a.(k8stesting.WatchActionImpl).ListOptions)
		once.Do(func() { close(watching) })
		return true, w, err
	})
	c, err := NewCatalog(Options{Kube: client})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	go c.Run(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), c.NodesSynced) {
		t.Fatal("nodes never synced")
	}

	n, ok := c.NodeByInstance("i-0123456789abcdef0")
	if !ok || n.Name != "aws-1" || n.Labels["pool"] != "a" || n.Spec.ProviderID != aws.Spec.ProviderID || len(n.Status.Images) != 0 {
		t.Fatalf("NodeByInstance(i-0123456789abcdef0) = %+v, %v; want the slim aws-1 with its providerID", n, ok)
	}
	if n, ok := c.NodeByInstance("kwok-1"); !ok || n.Name != "kwok-1" {
		t.Errorf("NodeByInstance(kwok-1) = %v, %v; want the node, Ready or not", n, ok)
	}
	for _, id := range []string{"bare", "", "i-0ffffffffffffffff"} {
		if n, ok := c.NodeByInstance(id); ok {
			t.Errorf("NodeByInstance(%q) = %s; want none", id, n.Name)
		}
	}
	var all []string
	c.EachNode(func(n *corev1.Node) { all = append(all, n.Name) })
	slices.Sort(all)
	if want := []string{"aws-1", "bare", "kwok-1"}; !slices.Equal(all, want) {
		t.Errorf("EachNode saw %v, want %v", all, want)
	}

	<-watching
	bare.Spec.ProviderID = "aws:///eu-west-1b/i-0bbbbbbbbbbbbbbbb"
	if _, err := client.CoreV1().Nodes().Update(ctx, bare, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Nodes().Delete(ctx, "aws-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The watch delivers in order: once the later delete is seen, the update was too.
	err = wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		_, stillThere := c.NodeByInstance("i-0123456789abcdef0")
		return !stillThere, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := c.NodeByInstance("i-0bbbbbbbbbbbbbbbb"); !ok || n.Name != "bare" {
		t.Errorf("after its providerID was set, NodeByInstance(i-0bbbbbbbbbbbbbbbb) = %v, %v; want bare", n, ok)
	}
}
