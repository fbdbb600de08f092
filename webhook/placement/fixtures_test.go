package placement

import (
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/sirupsen/logrus"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/fakeleases"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/ledger"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
)

const (
	ledgerNS        = "custom-kube-scheduler-webhook"
	testNS          = "shop"
	burstStrategy   = "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3"
	seedStrategy    = "nodesize=od4vcpu16gb,base=1,weight=0:nodesize=spot4vcpu16gb,weight=1:nodesize=spot8vcpu32gb,weight=1"
	testRSUID       = types.UID("rs-uid-1")
	testDeployUID   = types.UID("deploy-uid-1")
	testStatefulUID = types.UID("sts-uid-1")
)

func quietLog() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// cluster is a fake clientset holding a Deployment "web" annotated with ann, its
// ReplicaSet, and a StatefulSet "db" with the same annotations.
type cluster struct {
	objects []runtime.Object
	// rollouts, when not nil, are watched as Argo Rollouts (metadata only).
	rollouts []runtime.Object
}

// newCluster annotates the workloads with the strategy strat (even an empty one).
func newCluster(strat string) *cluster {
	return newAnnotatedCluster(map[string]string{strategy.AnnotationStrategy: strat})
}

func newAnnotatedCluster(ann map[string]string) *cluster {
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: testNS, UID: testDeployUID, Annotations: ann}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{
		Name: "web-5c4ff85997", Namespace: testNS, UID: testRSUID, Annotations: ann,
		OwnerReferences: []metav1.OwnerReference{controllerRef("Deployment", "web", testDeployUID)},
	}}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: testNS, UID: testStatefulUID, Annotations: ann}}
	return &cluster{objects: []runtime.Object{dep, rs, sts}}
}

func controllerRef(kind, name string, uid types.UID) metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: uid, Controller: &yes}
}

// mutator builds a PodMutator on synced informer caches over the fake clientset.
func (c *cluster) mutator(t testing.TB) (*PodMutator, *record.FakeRecorder, *ledger.Ledger) {
	t.Helper()
	client := fake.NewClientset(c.objects...)
	fakeleases.WithOptimisticConcurrency(client)
	caches, err := clusterview.NewCaches(client, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.rollouts != nil {
		scheme := runtime.NewScheme()
		metav1.AddMetaToScheme(scheme)
		meta := metadatafake.NewSimpleMetadataClient(scheme, c.rollouts...)
		caches.WatchRollouts(meta, meta)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	caches.Start(ctx)
	syncCtx, cancelSync := context.WithTimeout(ctx, 30*time.Second)
	defer cancelSync()
	if err := caches.WaitForSync(syncCtx); err != nil {
		t.Fatal(err)
	}
	recorder := record.NewFakeRecorder(1000)
	ledger, err := ledger.New(client, ledgerNS, quietLog(), ledger.Config{Identity: "test-replica", Settings: ledger.Settings{ReservationTTL: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	podsSeen, err := caches.OnPlacedPods(ledger.PodVisible, ledger.PodGone)
	if err != nil {
		t.Fatal(err)
	}
	ledger.Start(ctx)
	if !cache.WaitForCacheSync(syncCtx.Done(), ledger.HasSynced, podsSeen) {
		t.Fatal("seat record informer did not sync")
	}
	return &PodMutator{
		Resolver:   caches.Resolver,
		Ledger:     ledger,
		Recorder:   recorder,
		Metrics:    webhook.NewMetrics(),
		Namespaces: clusterview.NamespaceFilter{Blocklist: map[string]bool{"kube-system": true, "blocked": true}, Own: "custom-kube-scheduler-webhook"},
		Log:        quietLog(),
	}, recorder, ledger
}

// applyPatch applies the response's JSON patch to the request's pod.
func applyPatch(t testing.TB, req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse) *corev1.Pod {
	t.Helper()
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("response has no JSON patch: %+v", resp)
	}
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("decode patch %s: %v", resp.Patch, err)
	}
	out, err := patch.Apply(req.Object.Raw)
	if err != nil {
		t.Fatalf("apply patch %s: %v", resp.Patch, err)
	}
	var pod corev1.Pod
	if err := json.Unmarshal(out, &pod); err != nil {
		t.Fatal(err)
	}
	return &pod
}

// counter reads the value of metric name with labels from m's registry (0: no series).
func counter(t testing.TB, m *webhook.Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != webhook.MetricsNamespace+"_"+name {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			return s.GetCounter().GetValue()
		}
	}
	return 0
}

// firstSeatFree reports whether seat 1 of the test ReplicaSet is free in l: with none of
// its pods placed, whether no reservation holds a seat.
func firstSeatFree(l *ledger.Ledger) bool {
	seat, _ := l.Peek(context.Background(), clusterview.Revision{Namespace: testNS, UID: testRSUID})
	return seat == 1
}
