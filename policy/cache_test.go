package policy

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

func toUnstructured(t *testing.T, obj runtime.Object, kind string) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(v1alpha1.GroupVersion.String())
	u.SetKind(kind)
	return u
}

// policyDynamic is a fake dynamic client that serves the policy kinds, holding objs.
func policyDynamic(objs ...runtime.Object) *dynfake.FakeDynamicClient {
	return dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		v1alpha1.PlacementPolicies:        "PlacementPolicyList",
		v1alpha1.ClusterPlacementPolicies: "ClusterPlacementPolicyList",
	}, objs...)
}

// runCache starts c's informers until the test ends and waits for them to sync; it
// returns their context.
func runCache(t *testing.T, c *Cache) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c.Start(ctx)
	if err := c.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// TestCacheFollowsPolicies runs the informers (fake clients: the transform and the view
// rebuild are what is tested here; e2e runs them against the real API server).
func TestCacheFollowsPolicies(t *testing.T) {
	ns := namespace("shop", map[string]string{"tier": "web"}, "ns=1")
	client := fake.NewClientset(&ns)
	p := pp("shop", "web", "p=1", 0, map[string]string{"app": "web"})
	dyn := policyDynamic(toUnstructured(t, &p, v1alpha1.KindPlacementPolicy))
	c, err := NewCache(client, dyn, 0, logrus.New())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	if err := c.OnChange(func(ns string) { mu.Lock(); seen[ns]++; mu.Unlock() }); err != nil {
		t.Fatal(err)
	}
	ctx := runCache(t, c)
	w := Workload{Namespace: "shop", Kind: "Deployment", Labels: map[string]string{"app": "web"}}
	links := c.AppendLinks(nil, w)
	if len(links) != 2 || links[0].Name != "PlacementPolicy shop/web" || links[1].Name != "Namespace shop" {
		t.Fatalf("links %+v", links)
	}
	buf := make([]strategy.AnnotatedObject, 0, 4)
	if n := testing.AllocsPerRun(100, func() { buf = c.AppendLinks(buf[:0], w) }); n != 0 {
		t.Errorf("a lookup through the informer cache allocates %v times", n)
	}
	cp := cpp("all", "c=1", 0, nil, nil)
	if _, err := dyn.Resource(v1alpha1.ClusterPlacementPolicies).Create(ctx, toUnstructured(t, &cp, v1alpha1.KindClusterPlacementPolicy), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := dyn.Resource(v1alpha1.PlacementPolicies).Namespace("shop").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		links = c.AppendLinks(nil, w)
		return len(links) == 2 && links[0].Name == "ClusterPlacementPolicy all", nil
	})
	if err != nil {
		t.Fatalf("the cluster policy never took over: %+v", links)
	}
	if got := strategy.Resolve(links...); got.Raw != "c=1" {
		t.Fatalf("resolved %+v", got.Source)
	}
	if _, err := client.CoreV1().Namespaces().Update(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(c.AppendLinks(nil, w)) == 1, nil
	})
	if err != nil {
		t.Fatalf("the namespace default outlived its annotation: %+v", c.AppendLinks(nil, w))
	}
	// Told: the namespaced policy (added, deleted: "shop"), the cluster policy (""), the
	// namespace's default gone ("shop" again).
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return seen["shop"] >= 3 && seen[""] >= 1, nil
	})
	if err != nil {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("changes told: %v", seen)
	}
}
