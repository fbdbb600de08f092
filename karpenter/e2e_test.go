//go:build e2e

package karpenter

// Run against a cluster with Karpenter's CRDs installed (scripts/localcluster):
//
//	KUBECONFIG=.localcluster/kubeconfig go test -tags e2e -run E2E ./karpenter/

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

func TestE2ENodePoolInformer(t *testing.T) {
	path := os.Getenv("KUBECONFIG")
	if path == "" {
		t.Fatal("KUBECONFIG must point at the test cluster")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("loading %s: %v", path, err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const kwokCPU = "karpenter.kwok.sh/instance-cpu"
	c, err := NewCatalog(Options{Kube: kube, Dynamic: dyn, Matcher: NewMatcher(kwokCPU)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "catalog sync", c.HasSynced)
	if ok, err := served(c.discovery, nodePoolGVR().Resource); err != nil || !ok {
		t.Fatalf("the cluster does not serve %s nodepools (served=%v, err=%v): install Karpenter's CRDs", nodePoolGroupVersion, ok, err)
	}

	name := fmt.Sprintf("e2e-catalog-%d", time.Now().UnixNano()%1_000_000)
	size := name + "-size"
	// Gt 3, not Gte 4: Karpenter accepts Gte only from v1.9, and this test runs against
	// the oldest of the range too (match_test.go covers Gte).
	np := pool(name, map[string]string{"nodesize": size},
		req(capType, corev1.NodeSelectorOpIn, "spot"),
		req(kwokCPU, corev1.NodeSelectorOpGt, "3"))
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: "karpenter.kwok.sh", Kind: "KWOKNodeClass", Name: "default"}
	np.Spec.Template.Spec.Taints = []corev1.Taint{{Key: "capacity", Value: "spot", Effect: corev1.TaintEffectNoSchedule}}
	np.Spec.Template.Spec.StartupTaints = []corev1.Taint{{Key: "e2e-startup", Effect: corev1.TaintEffectNoSchedule}}
	res := dyn.Resource(nodePoolGVR())
	if _, err := res.Create(ctx, unstructuredPool(t, np), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating NodePool %s: %v", name, err)
	}
	t.Cleanup(func() { _ = res.Delete(context.Background(), name, metav1.DeleteOptions{}) })

	served := func(tm map[string]string) bool {
		for _, s := range c.Serving(tm) {
			if s.Kind == KindNodePool && s.Name == name {
				return true
			}
		}
		return false
	}
	match := term("nodesize", size, capType, "spot", kwokCPU, "8")
	waitFor(t, "the new NodePool to serve its term", func() bool {
		if served(match) {
			return true
		}
		for _, p := range c.nodePools() {
			if p.Name == name && !nodePoolUsable(p) {
				t.Fatalf("NodePool %s reported not Ready by Karpenter (is KWOKNodeClass default missing?): %+v", name, p.Status.Conditions)
			}
		}
		return false
	})
	for _, tm := range []map[string]string{
		term("nodesize", size, capType, "on-demand"),
		term("nodesize", size, kwokCPU, "2"),
		term("nodesize", size+"-typo"),
	} {
		if served(tm) {
			t.Errorf("NodePool %s serves %v", name, tm)
		}
	}
	var sources []Source
	for _, s := range c.Serving(match) {
		if s.Name == name {
			sources = append(sources, s)
		}
	}
	want := []corev1.Toleration{{Key: "capacity", Operator: corev1.TolerationOpEqual, Value: "spot", Effect: corev1.TaintEffectNoSchedule}}
	if got := TolerationsFor(sources); !reflect.DeepEqual(got, want) {
		t.Errorf("tolerations = %+v, want %+v", got, want)
	}

	// Tolerations remembers its answers; a changed taint and a deleted pool must
	// still reach them (Karpenter updating the pool's status meanwhile must not matter).
	if tols, ok := c.Tolerations(match); !ok || !reflect.DeepEqual(tols, want) {
		t.Fatalf("Tolerations = %+v, %v; want %+v, true", tols, ok, want)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := res.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		taints := []interface{}{map[string]interface{}{"key": "capacity", "value": "spot-changed", "effect": "NoSchedule"}}
		if err := unstructured.SetNestedSlice(u.Object, taints, "spec", "template", "spec", "taints"); err != nil {
			return err
		}
		_, err = res.Update(ctx, u, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("changing the taint of NodePool %s: %v", name, err)
	}
	waitFor(t, "the changed taint in the remembered tolerations", func() bool {
		tols, ok := c.Tolerations(match)
		return ok && len(tols) == 1 && tols[0].Value == "spot-changed"
	})

	if err := res.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting NodePool %s: %v", name, err)
	}
	waitFor(t, "the deleted NodePool to stop serving", func() bool { return !served(match) })
	// The generation moves in an event handler, just after the store changes.
	waitFor(t, "the remembered answer to follow the deletion", func() bool { _, ok := c.Tolerations(match); return !ok })
}
