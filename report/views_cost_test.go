package report_test

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// costStrategy is the scale bench's strategy: two on-demand, then spot 3:1.
const costStrategy = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"

// costCluster is a fake cluster of sets ReplicaSets of perSet placed pods each, on
// nodes of each term's capacity type (250 pods a node), as the webhook leaves them:
// typical pods (a container with requests, env, mounts; the API server's token
// volume, tolerations and managed fields; a Running status).
func costCluster(tb testing.TB, sets, perSet int) *fake.Clientset {
	tb.Helper()
	s, err := strategy.Parse(costStrategy)
	if err != nil {
		tb.Fatal(err)
	}
	client := fake.NewClientset()
	ctx := context.Background()
	const ns = "shop"
	created := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	nodeOf := map[int]int{}
	nodes := map[string]bool{}
	for set := range sets {
		name := fmt.Sprintf("web-%04d-5d8f7c9b4", set)
		rs := &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: uuid.NewUUID()},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptrInt32(int32(perSet)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}, Annotations: map[string]string{strategy.AnnotationStrategy: costStrategy}}}},
		}
		if _, err := client.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
			tb.Fatal(err)
		}
		seats := s.Seats(perSet)
		for i := range perSet {
			term := seats[i]
			nodeOf[term]++
			node := fmt.Sprintf("node-t%d-%04d", term+1, nodeOf[term]/250)
			if !nodes[node] {
				nodes[node] = true
				capacityType := "spot"
				if term == 0 {
					capacityType = "on-demand"
				}
				alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi")}
				n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{
					"karpenter.sh/capacity-type": capacityType, corev1.LabelInstanceTypeStable: "m5.16xlarge",
					corev1.LabelTopologyRegion: "eu-west-1", corev1.LabelTopologyZone: "eu-west-1a"}},
					Status: corev1.NodeStatus{Allocatable: alloc, Capacity: alloc}}
				if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
					tb.Fatal(err)
				}
			}
			if _, err := client.CoreV1().Pods(ns).Create(ctx, costPod(rs, i+1, term, s.Terms[term], node, created), metav1.CreateOptions{}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return client
}

func ptrInt32(v int32) *int32 { return &v }

// costPod is a typical placed pod of rs, Running on node.
func costPod(rs *appsv1.ReplicaSet, seat, term int, t strategy.Term, node string, created metav1.Time) *corev1.Pod {
	yes := true
	secs := int64(300)
	selector := map[string]string{}
	for _, l := range t.Labels {
		selector[l.Key] = l.Value
	}
	var env []corev1.EnvVar
	for i := range 6 {
		env = append(env, corev1.EnvVar{Name: "SETTING_" + strconv.Itoa(i), Value: "value-of-the-setting-" + strconv.Itoa(i)})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-%05d", rs.Name, seat), Namespace: rs.Namespace, UID: uuid.NewUUID(), CreationTimestamp: created,
			GenerateName: rs.Name + "-",
			Labels:       map[string]string{"app": rs.Spec.Selector.MatchLabels["app"], "pod-template-hash": "5d8f7c9b4", strategy.LabelManaged: "true"},
			Annotations: map[string]string{
				strategy.AnnotationStrategy: costStrategy, strategy.AnnotationSeat: strconv.Itoa(seat), strategy.AnnotationTerm: strconv.Itoa(term + 1),
				strategy.AnnotationReservation: string(uuid.NewUUID()), strategy.AnnotationDeletionCost: strconv.Itoa(-seat),
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &created, FieldsType: "FieldsV1",
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:app":{},"f:pod-template-hash":{}},"f:ownerReferences":{}},"f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{".":{},"f:env":{},"f:image":{},"f:name":{},"f:resources":{}}}}}`)}}},
		},
		Spec: corev1.PodSpec{
			NodeName: node, NodeSelector: selector, ServiceAccountName: "default",
			Containers: []corev1.Container{{
				Name: "web", Image: "123456789012.dkr.ecr.eu-west-1.amazonaws.com/shop/web:1.42.0", Env: env,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
				},
				VolumeMounts:             []corev1.VolumeMount{{Name: "kube-api-access-x7k2p", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
				TerminationMessagePath:   "/dev/termination-log",
				TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent,
			}},
			Volumes: []corev1.Volume{{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &secs}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			}}}}},
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &secs},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &secs},
			},
			EnableServiceLinks: &yes,
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, HostIP: "10.0.12.34", PodIP: "10.0.56.78", StartTime: &created, QOSClass: corev1.PodQOSBurstable,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: created},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: created},
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: created},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: created},
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "web", Ready: true, Image: "123456789012.dkr.ecr.eu-west-1.amazonaws.com/shop/web:1.42.0",
				ImageID:     "123456789012.dkr.ecr.eu-west-1.amazonaws.com/shop/web@sha256:0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0",
				ContainerID: "containerd://4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c",
				State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: created}}}},
		},
	}
}

// costCaches are serve's views of client, synced.
func costCaches(tb testing.TB, ctx context.Context, client *fake.Clientset) report.Views {
	tb.Helper()
	caches, err := clusterview.NewCaches(client, 0)
	if err != nil {
		tb.Fatal(err)
	}
	caches.Start(ctx)
	if err := caches.WaitForSync(ctx); err != nil {
		tb.Fatal(err)
	}
	synced := make(chan struct{})
	close(synced)
	return report.Views{Caches: caches, Synced: synced, Skip: func(ns string) bool { return ns == "kube-system" }}
}

// costPrices prices the fake cluster's nodes.
func costPrices(tb testing.TB) pricing.Source {
	tb.Helper()
	table, err := pricing.ParseTable(strings.NewReader("m5.16xlarge on-demand * 3.072\nm5.16xlarge spot eu-west-1a 1.1\n"))
	if err != nil {
		tb.Fatal(err)
	}
	return table
}

// The cost refresh prices from serve's caches what listing every pod priced: the same
// pods per term and capacity type, the same cost; and its client lists no pod and no
// workload (only the nodes, in pages).
func TestCostRefreshFromTheCaches(t *testing.T) {
	client := costCluster(t, 6, 40)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	views := costCaches(t, ctx, client)
	prices := costPrices(t)

	dyn := policyDynamic()
	listed, err := report.Collect(ctx, client, dyn, report.Options{Namespace: metav1.NamespaceAll, SkipServing: true,
		PodSelector: labels.Set{strategy.LabelManaged: "true"}.String()})
	if err != nil {
		t.Fatal(err)
	}
	report.AddCost(ctx, &listed, prices)

	client.ClearActions()
	cached, err := views.Collect(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	report.AddCost(ctx, &cached, prices)
	for _, a := range client.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource != "nodes" {
			t.Errorf("the cost refresh listed %s: serve's caches hold them", a.GetResource().Resource)
		}
	}
	if len(cached.Workloads) != 6 || len(listed.Workloads) != 6 {
		t.Fatalf("workloads: %d from the caches, %d listed; want 6", len(cached.Workloads), len(listed.Workloads))
	}
	for i, w := range cached.Workloads {
		l := listed.Workloads[i]
		if w.Name != l.Name || w.Cost == nil || l.Cost == nil || !reflect.DeepEqual(*w.Cost, *l.Cost) || w.Cost.PricedPods != 40 {
			t.Errorf("%s: cost %+v from the caches, %+v listed", w.Name, w.Cost, l.Cost)
		}
		for ti, term := range w.Terms {
			if fmt.Sprint(term.Nodes) != fmt.Sprint(l.Terms[ti].Nodes) {
				t.Errorf("%s term %d: nodes %+v from the caches, %+v listed", w.Name, term.Term, term.Nodes, l.Terms[ti].Nodes)
			}
		}
	}
}

// heldDuring runs fn and returns the most heap it held above what was live before:
// another goroutine collects and reads the live heap over and over while fn runs (a
// measurement, asserted only against a bound far from both figures).
func heldDuring(fn func()) uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var m runtime.MemStats
		for !done.Load() {
			runtime.GC()
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
		}
	}()
	fn()
	done.Store(true)
	wg.Wait()
	if p := peak.Load(); p > base {
		return p - base
	}
	return 0
}

// TestCostRefreshHeap measures the heap a cost refresh holds per placed pod, listing
// them (serve's refresh before: report.Collect with its options) and from the caches
// (now), with COST_REFRESH_PODS pods (default 2,000; docs/sizing.md has the figures at
// 100,000, with COST_REFRESH_LISTED=off). The refresh from the caches must hold under
// 1 KiB per pod; listing held
// 5 to 8 KiB through the API server (12 KiB through the fake client, which copies).
func TestCostRefreshHeap(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("builds thousands of pods and measures the heap: not in -short mode, nor under the race detector (make test-unit runs it without)")
	}
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("COST_REFRESH_PODS")); err == nil && v > 0 {
		n = v
	}
	const perSet = 100
	client := costCluster(t, (n+perSet-1)/perSet, perSet)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	views := costCaches(t, ctx, client)
	prices := costPrices(t)
	dyn := policyDynamic()
	refresh := func(collect func(context.Context) (report.Report, error)) (uint64, int) {
		var priced int
		held := heldDuring(func() {
			r, err := collect(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			report.AddCost(ctx, &r, prices)
			for _, w := range r.Workloads {
				priced += w.Cost.PricedPods
			}
		})
		return held, priced
	}
	// COST_REFRESH_LISTED=off leaves the listing out: at 100,000 pods it holds GiBs.
	listedHeld, listedPriced := uint64(0), n
	if os.Getenv("COST_REFRESH_LISTED") != "off" {
		listedHeld, listedPriced = refresh(func(ctx context.Context) (report.Report, error) {
			return report.Collect(ctx, client, dyn, report.Options{Namespace: metav1.NamespaceAll, SkipServing: true,
				PodSelector: labels.Set{strategy.LabelManaged: "true"}.String()})
		})
	}
	cachedHeld, cachedPriced := refresh(func(ctx context.Context) (report.Report, error) { return views.Collect(ctx, client) })
	if listedHeld > 0 {
		t.Logf("%d placed pods: a refresh listing them held %.0f B per pod (%.1f MiB)", n, float64(listedHeld)/float64(n), float64(listedHeld)/(1<<20))
	}
	t.Logf("%d placed pods: a refresh from the caches held %.0f B per pod (%.2f MiB)", n, float64(cachedHeld)/float64(n), float64(cachedHeld)/(1<<20))
	if listedPriced != n || cachedPriced != n {
		t.Fatalf("priced %d pods listing, %d from the caches; want %d", listedPriced, cachedPriced, n)
	}
	if perPod := float64(cachedHeld) / float64(n); perPod > 1024 {
		t.Errorf("a refresh from the caches held %.0f B per placed pod, want under 1 KiB", perPod)
	}
}

// runtimeScheme is an empty scheme for the fake dynamic client (no policies).
func runtimeScheme() *k8sruntime.Scheme { return k8sruntime.NewScheme() }

// policyDynamic is a dynamic client that serves empty policy lists.
func policyDynamic() *dynfake.FakeDynamicClient {
	return dynfake.NewSimpleDynamicClientWithCustomListKinds(runtimeScheme(), map[schema.GroupVersionResource]string{
		v1alpha1.PlacementPolicies: "PlacementPolicyList", v1alpha1.ClusterPlacementPolicies: "ClusterPlacementPolicyList",
	})
}
