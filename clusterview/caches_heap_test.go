package clusterview_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/ledger"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// heapPods is how many placed pods the heap measurements cache, as many as `make
// bench`'s memory phase creates.
const heapPods = 5000

// benchPodJSON returns n placed pods of one ReplicaSet as the API server sends them
// once admitted and found unschedulable (like those of `make bench`'s memory phase),
// encoded: decoding them gives every pod strings of its own, as the informer's
// decoder does.
func benchPodJSON(tb testing.TB, n int) [][]byte {
	tb.Helper()
	const (
		ns     = "bench-webhook"
		deploy = "memory-5000"
		hash   = "7d9f8c6b5"
		strat  = "bench.example.com/pool=a,weight=1:bench.example.com/pool=b,weight=1"
	)
	rsUID := uuid.NewUUID()
	yes := true
	grace := int64(0)
	toleration := func(key string) corev1.Toleration {
		secs := int64(300)
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &secs}
	}
	created := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	out := make([][]byte, n)
	for i := range n {
		seat := i + 1
		term := 1 + i%2
		name := fmt.Sprintf("%s-%s-%05x", deploy, hash, i)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, GenerateName: deploy + "-" + hash + "-", Namespace: ns, UID: uuid.NewUUID(),
				ResourceVersion: strconv.Itoa(100000 + 3*i), CreationTimestamp: created,
				Labels: map[string]string{"app": deploy, "pod-template-hash": hash, strategy.LabelManaged: "true"},
				Annotations: map[string]string{
					strategy.AnnotationStrategy:       strat,
					strategy.AnnotationSeat:           strconv.Itoa(seat),
					strategy.AnnotationTerm:           strconv.Itoa(term),
					strategy.AnnotationDeletionCost:   strconv.Itoa(-seat),
					strategy.AnnotationReservation:    string(uuid.NewUUID()),
					"kubectl.kubernetes.io/something": "x",
				},
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "apps/v1", Kind: "ReplicaSet", Name: deploy + "-" + hash, UID: rsUID,
					Controller: &yes, BlockOwnerDeletion: &yes,
				}},
				ManagedFields: []metav1.ManagedFieldsEntry{
					{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &created, FieldsType: "FieldsV1",
						FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:app":{},"f:pod-template-hash":{}},"f:ownerReferences":{}},"f:spec":{"f:containers":{}}}`)}},
					{Manager: "kube-scheduler", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &created, FieldsType: "FieldsV1", Subresource: "status",
						FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{".":{},"k:{\"type\":\"PodScheduled\"}":{}}}}`)}},
				},
			},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{
					Name: "app", Image: "registry.k8s.io/pause:3.10", ImagePullPolicy: corev1.PullIfNotPresent,
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi"),
					}},
					TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
					VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access-x", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
				}},
				NodeSelector:                  map[string]string{"bench.example.com/pool": string(rune('a' + term - 1))},
				Tolerations:                   []corev1.Toleration{toleration("node.kubernetes.io/not-ready"), toleration("node.kubernetes.io/unreachable")},
				RestartPolicy:                 corev1.RestartPolicyAlways,
				TerminationGracePeriodSeconds: &grace,
				DNSPolicy:                     corev1.DNSClusterFirst,
				ServiceAccountName:            "default",
				SchedulerName:                 corev1.DefaultSchedulerName,
			},
			Status: corev1.PodStatus{
				Phase:    corev1.PodPending,
				QOSClass: corev1.PodQOSBurstable,
				Conditions: []corev1.PodCondition{{
					Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
					LastTransitionTime: created,
					Message:            "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
				}},
			},
		}
		b, err := json.Marshal(pod)
		if err != nil {
			tb.Fatal(err)
		}
		out[i] = b
	}
	return out
}

// heapProfile names a file to write the heap profile to while the pods are cached: run
// with -memprofilerate 1 and read it with go tool pprof -sample_index=inuse_space.
var heapProfile = flag.String("cachedpodheap.profile", "", "write a heap profile of the cached pods to this file")

func writeHeapProfile(tb testing.TB, path string) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		tb.Fatal(err)
	}
}

// heapAfterGC returns the live heap once garbage is collected.
func heapAfterGC() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// cachedHeap returns the live heap a pod cache (and, with withLedger, a seat ledger
// fed by it, as serve wires them) holds once it has listed the pods encoded in pods.
func cachedHeap(tb testing.TB, pods [][]byte, withLedger bool) uint64 {
	tb.Helper()
	client := pagedClient(tb, pods)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runtime.GC()
	before := heapAfterGC()
	caches, seats := startSynced(ctx, tb, client, withLedger)
	if got := clusterview.CachedPods(caches); got != len(pods) {
		tb.Fatalf("%d pods cached, want %d", got, len(pods))
	}
	after := heapAfterGC()
	if *heapProfile != "" && len(pods) > 0 {
		writeHeapProfile(tb, *heapProfile)
	}
	runtime.KeepAlive(caches)
	runtime.KeepAlive(seats)
	return after - min(after, before)
}

// startSynced starts a pod cache on client (and, with withLedger, a seat ledger fed by
// it, as serve wires them) and returns once all have synced; seats is nil without the
// ledger.
func startSynced(ctx context.Context, tb testing.TB, client *fake.Clientset, withLedger bool) (caches *clusterview.Caches, seats *ledger.Ledger) {
	tb.Helper()
	caches, err := clusterview.NewCaches(client, 0)
	if err != nil {
		tb.Fatal(err)
	}
	var podsSeen cache.InformerSynced
	if withLedger {
		if seats, err = ledger.New(client, ledgerNS, quietLog(), ledger.Config{Identity: "heap-test", Settings: ledger.Settings{ReservationTTL: 30 * time.Second}}); err != nil {
			tb.Fatal(err)
		}
		if podsSeen, err = caches.OnPlacedPods(seats.PodVisible, seats.PodGone); err != nil {
			tb.Fatal(err)
		}
		seats.Start(ctx)
	}
	caches.Start(ctx)
	if err := caches.WaitForSync(ctx); err != nil {
		tb.Fatal(err)
	}
	if podsSeen != nil && !cache.WaitForCacheSync(ctx.Done(), podsSeen, seats.HasSynced) {
		tb.Fatal("the ledger did not see every pod")
	}
	return caches, seats
}

// heapPerPod returns the live heap per cached pod: the heap with n pods cached less
// the heap with none, over n.
func heapPerPod(tb testing.TB, n int, withLedger bool) float64 {
	tb.Helper()
	pods := benchPodJSON(tb, n)
	empty := cachedHeap(tb, nil, withLedger)
	full := cachedHeap(tb, pods, withLedger)
	return (float64(full) - float64(empty)) / float64(n)
}

// BenchmarkCachedPodHeap reports the live heap (bytes/pod) each cached placed pod
// costs: "informer" is the pod informer alone (the trimmed pod, its key and its
// indexes), "ledger" adds the seat ledger fed by it as serve wires it (its per-pod
// index, and the fulfilled reservations it remembers for twice the reservation TTL).
//
//	go test -run XXX -bench BenchmarkCachedPodHeap -benchtime 3x ./clusterview/
//
// Add -memprofilerate 1 -cachedpodheap.profile heap.pprof to see where the bytes go.
func BenchmarkCachedPodHeap(b *testing.B) {
	for _, withLedger := range []bool{false, true} {
		name := "informer"
		if withLedger {
			name = "ledger"
		}
		b.Run(name, func(b *testing.B) {
			var sum float64
			for b.Loop() {
				sum += heapPerPod(b, heapPods, withLedger)
			}
			b.ReportMetric(sum/float64(b.N), "bytes/pod")
		})
	}
}

// TestCachedPodHeap keeps the live heap per cached placed pod, the ledger's share
// included (the fulfilled reservations it remembers for a while among it), at or under
// 768 bytes: the packed record's gain kept with room for noise (BenchmarkCachedPodHeap
// gives the figure).
func TestCachedPodHeap(t *testing.T) {
	if testing.Short() || clusterview.RaceEnabled {
		t.Skip("measures the heap: not in -short mode, nor under the race detector")
	}
	if perPod := heapPerPod(t, heapPods, true); perPod > 768 {
		t.Errorf("%.0f bytes of live heap per cached pod, want at most 768 (see BenchmarkCachedPodHeap)", perPod)
	} else {
		t.Logf("%.0f bytes of live heap per cached pod", perPod)
	}
}

// ledgerNS is where the seat ledger keeps its records.
const ledgerNS = "custom-kube-scheduler-webhook"

func quietLog() logrus.FieldLogger {
	l, _ := logtest.NewNullLogger()
	return l
}
