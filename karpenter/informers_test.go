package karpenter

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
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
