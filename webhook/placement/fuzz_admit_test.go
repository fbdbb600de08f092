package placement

import (
	"context"
	"encoding/json"
	"reflect"
	"sync"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes/fake"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/internal/webhooktest"
)

// admitInput is one fuzzed admission: a pod built from the fields, or, with RawPod
// set, arbitrary bytes as the pod.
type admitInput struct {
	Strategy          string
	Flags             uint8 // owner kind, where the strategy stands, dry-run, raw pod
	PodIndex          string
	LabelKey, LabelV  string
	AnnKey, AnnV      string
	SelKey, SelV      string
	TolKey, TolV      string
	TolEffect         string
	OrdinalStart      int32
	RawPod            []byte
	PodName, PodOwner string
}

// pod builds the input's pod and the owner UID it names.
func (in admitInput) pod() *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: in.PodName, GenerateName: "web-5c4ff85997-", Namespace: testNS,
			Labels:      map[string]string{"app": "web"},
			Annotations: map[string]string{},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "alpine"}}},
	}
	if in.LabelKey != "" {
		pod.Labels[in.LabelKey] = in.LabelV
	}
	if in.PodIndex != "" {
		pod.Labels[appsv1.PodIndexLabel] = in.PodIndex
	}
	if in.AnnKey != "" {
		pod.Annotations[in.AnnKey] = in.AnnV
	}
	if in.Flags&0x08 != 0 {
		pod.Annotations[strategy.AnnotationStrategy] = in.Strategy
	}
	if in.SelKey != "" {
		pod.Spec.NodeSelector = map[string]string{in.SelKey: in.SelV}
	}
	if in.TolKey != "" || in.TolEffect != "" {
		pod.Spec.Tolerations = []corev1.Toleration{{Key: in.TolKey, Operator: corev1.TolerationOpEqual, Value: in.TolV, Effect: corev1.TaintEffect(in.TolEffect)}}
	}
	switch in.Flags & 0x07 {
	case 0:
		pod.OwnerReferences = []metav1.OwnerReference{controllerRef("ReplicaSet", "web-5c4ff85997", testRSUID)}
	case 1:
		pod.OwnerReferences = []metav1.OwnerReference{controllerRef("ReplicaSet", "web-5c4ff85997", types.UID(in.PodOwner))}
	case 2:
		pod.OwnerReferences = []metav1.OwnerReference{controllerRef("StatefulSet", "db", testStatefulUID)}
	case 3:
		pod.OwnerReferences = []metav1.OwnerReference{controllerRef("StatefulSet", "db", types.UID(in.PodOwner))}
	case 4:
		pod.OwnerReferences = []metav1.OwnerReference{controllerRef("DaemonSet", "agent", "ds-uid")}
	case 5:
		pod.OwnerReferences = []metav1.OwnerReference{controllerRef(in.PodOwner, "web-5c4ff85997", testRSUID)}
	case 6:
		// bare pod
	case 7:
		pod.OwnerReferences = []metav1.OwnerReference{controllerRef("ReplicaSet", in.PodOwner, testRSUID)}
	}
	return pod
}

// fuzzResolver is the real clusterview.ListerResolver over listers filled directly (no informer to
// sync per input), and a fake client for the live GET of what the listers lack.
func fuzzResolver(t testing.TB, client *fake.Clientset, strat string, flags uint8, start int32) *clusterview.ListerResolver {
	ann := map[string]string{}
	if flags&0x08 == 0 {
		ann[strategy.AnnotationStrategy] = strat
	}
	objs := newAnnotatedCluster(ann).objects
	sts := objs[2].(*appsv1.StatefulSet)
	if start != 0 {
		sts.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: start}
	}
	index := func(objs ...runtime.Object) cache.Indexer {
		ix := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		for _, o := range objs {
			if err := ix.Add(o); err != nil {
				t.Fatal(err)
			}
		}
		return ix
	}
	return &clusterview.ListerResolver{
		Client:       client,
		Deployments:  appslisters.NewDeploymentLister(index(objs[0])),
		ReplicaSets:  appslisters.NewReplicaSetLister(index(objs[1])),
		StatefulSets: appslisters.NewStatefulSetLister(index(sts)),
	}
}

// fuzzLedger hands out the seats of each revision in order, the same seat again to a
// retried admission: the admission path is under test here, not the ledger (whose
// tests run against the API server).
type fuzzLedger struct {
	mu    sync.Mutex
	next  map[clusterview.Revision]int
	seats map[types.UID]int
}

func (l *fuzzLedger) Claim(_ context.Context, revision clusterview.Revision, admission types.UID) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seat, ok := l.seats[admission]; ok {
		return seat, nil
	}
	l.next[revision]++
	l.seats[admission] = l.next[revision]
	return l.next[revision], nil
}

func (l *fuzzLedger) Peek(_ context.Context, revision clusterview.Revision) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next[revision] + 1, nil
}

func (l *fuzzLedger) Release(_ context.Context, _ clusterview.Revision, admission types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.seats, admission)
}

// admitSeeds are inputs that once exposed defects, plus ordinary ones.
var admitSeeds = []admitInput{
	{Strategy: burstStrategy},
	{Strategy: seedStrategy, Flags: 2, PodIndex: "4"},
	{Strategy: seedStrategy, Flags: 2, PodIndex: "9223372036854775807"},
	{Strategy: seedStrategy, Flags: 2, PodIndex: "2147483646"},
	{Strategy: seedStrategy, Flags: 2, PodIndex: "7", OrdinalStart: 5},
	{Strategy: twentyTerms, Flags: 2, PodIndex: "100000000"},
	{Strategy: twentyTerms, Flags: 3, PodIndex: "100000000", PodOwner: "forged"},
	{Strategy: "a=1:a=1"},
	{Strategy: "karpenter.sh/capacity-type=reserved|on-demand,base=2:karpenter.sh/capacity-type=spot", SelKey: "karpenter.sh/capacity-type", SelV: "on-demand"},
	{Strategy: "a=1,b=2:b=2,a=1"},
	{Strategy: "a=1:a=1,b=2", Flags: 0x08},
	{Strategy: "karpenter.sh/capacity-type=spot", SelKey: "karpenter.sh/capacity-type", SelV: "on-demand"},
	{Strategy: "karpenter.sh/capacity-type=spot", SelKey: "kubernetes.io/arch", SelV: "arm64", TolKey: "karpenter.sh/capacity-type", TolV: "spot", TolEffect: "NoSchedule"},
	{Strategy: "x/y~z=1", AnnKey: "a/b~c", AnnV: "v", LabelKey: "l/~", LabelV: "v"},
	{Strategy: burstStrategy, AnnKey: strategy.AnnotationSeat, AnnV: "3"},
	{Strategy: burstStrategy, Flags: 0x10},
	{Strategy: burstStrategy, Flags: 4},
	{Strategy: burstStrategy, Flags: 6 | 0x08},
	{Strategy: burstStrategy, Flags: 5, PodOwner: "Job"},
	{Strategy: burstStrategy, Flags: 0x80, RawPod: []byte(`{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-5c4ff85997","uid":"rs-uid-1","controller":true}],"annotations":null,"labels":null},"spec":{"nodeSelector":null,"tolerations":null}}`)},
	{Strategy: burstStrategy, Flags: 0x80, RawPod: []byte(`{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-5c4ff85997","uid":"rs-uid-1","controller":true}]}}`)},
	{Strategy: burstStrategy, Flags: 0x80, RawPod: []byte(`[]`)},
}

// FuzzAdmit feeds arbitrary pods and strategies through PodMutator.Admit (directly,
// not through the HTTP handler's recover) and checks, for every input: no panic, the
// pod is allowed, any patch is a JSON patch that applies cleanly to the pod as the API
// server sent it (with evanphx/json-patch, what the API server itself uses), the
// patched pod decodes, and it keeps everything the pod had.
func FuzzAdmit(f *testing.F) {
	for _, s := range admitSeeds {
		f.Add(s.Strategy, s.Flags, s.PodIndex, s.LabelKey, s.LabelV, s.AnnKey, s.AnnV, s.SelKey, s.SelV, s.TolKey, s.TolV, s.TolEffect, s.OrdinalStart, s.RawPod, s.PodName, s.PodOwner)
	}
	client := fake.NewClientset()
	ledger := &fuzzLedger{next: map[clusterview.Revision]int{}, seats: map[types.UID]int{}}
	m := &PodMutator{
		Ledger:     ledger,
		Capacity:   fuzzCapacity{},
		Metrics:    webhook.NewMetrics(),
		Namespaces: clusterview.NamespaceFilter{Blocklist: map[string]bool{"kube-system": true}, Own: "custom-kube-scheduler-webhook"},
		Log:        quietLog(),
	}
	f.Fuzz(func(t *testing.T, strat string, flags uint8, podIndex, labelKey, labelV, annKey, annV, selKey, selV, tolKey, tolV, tolEffect string, start int32, rawPod []byte, podName, podOwner string) {
		in := admitInput{strat, flags, podIndex, labelKey, labelV, annKey, annV, selKey, selV, tolKey, tolV, tolEffect, start, rawPod, podName, podOwner}
		m.Resolver = fuzzResolver(t, client, strat, flags, start)
		var req *admissionv1.AdmissionRequest
		if flags&0x80 != 0 {
			req = webhooktest.CreateRequest(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: testNS}})
			req.Object.Raw = rawPod
		} else {
			req = webhooktest.CreateRequest(t, in.pod())
		}
		if flags&0x10 != 0 {
			req.DryRun = new(true)
		}
		req.UID = uuid.NewUUID()
		resp := m.Admit(context.Background(), req)
		m.Ledger.Release(context.Background(), clusterview.Revision{Namespace: testNS, UID: testRSUID}, req.UID)
		checkAdmitResponse(t, req, resp, flags&0x80 != 0)
	})
}

// checkAdmitResponse asserts what FuzzAdmit asserts of one response.
func checkAdmitResponse(t *testing.T, req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse, canonical bool) {
	t.Helper()
	if resp == nil || !resp.Allowed {
		t.Fatalf("pod not allowed: %+v", resp)
	}
	if resp.Patch == nil {
		return
	}
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patch without JSONPatch type: %+v", resp)
	}
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("patch %s does not decode: %v", resp.Patch, err)
	}
	for _, op := range patch {
		if op.Kind() != "add" {
			t.Fatalf("patch %s has a %q operation; only adds keep the pod's own fields", resp.Patch, op.Kind())
		}
	}
	var before, after corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &before); err != nil {
		t.Fatalf("a pod that does not decode was patched: %s", resp.Patch)
	}
	// The API server sends the pod as its serializer writes it: metadata and spec are
	// always there. Arbitrary bytes are checked in that form, as re-encoded.
	sent := req.Object.Raw
	if canonical {
		if sent, err = json.Marshal(&before); err != nil {
			t.Fatal(err)
		}
	}
	out, err := patch.Apply(sent)
	if err != nil {
		t.Fatalf("patch %s does not apply to %s: %v", resp.Patch, sent, err)
	}
	if err := json.Unmarshal(out, &after); err != nil {
		t.Fatalf("patched pod %s does not decode: %v", out, err)
	}
	for name, pair := range map[string][2]map[string]string{
		"nodeSelector": {before.Spec.NodeSelector, after.Spec.NodeSelector},
		"labels":       {before.Labels, after.Labels},
		"annotations":  {before.Annotations, after.Annotations},
	} {
		for k, v := range pair[0] {
			if got, ok := pair[1][k]; !ok || got != v {
				t.Fatalf("patch %s changed %s[%q] from %q to %q", resp.Patch, name, k, v, got)
			}
		}
	}
	if n := len(before.Spec.Tolerations); n > 0 && (len(after.Spec.Tolerations) < n || !reflect.DeepEqual(after.Spec.Tolerations[:n], before.Spec.Tolerations)) {
		t.Fatalf("patch %s changed the pod's own tolerations", resp.Patch)
	}
	seat, ok := strategy.SeatOf(&after)
	if !ok || seat < 1 || seat > strategy.MaxSeat {
		t.Fatalf("placed pod has seat %d: %s", seat, resp.Patch)
	}
	if after.Labels[strategy.LabelManaged] != "true" || after.Annotations[strategy.AnnotationTerm] == "" {
		t.Fatalf("placed pod lacks the managed label or term: %s", resp.Patch)
	}
}

// fuzzCapacity serves every term, with one toleration per selected label, so patches
// carry tolerations too.
type fuzzCapacity struct{}

func (fuzzCapacity) Tolerations(labels map[string]string) ([]corev1.Toleration, bool) {
	var out []corev1.Toleration
	for k, v := range labels {
		out = append(out, corev1.Toleration{Key: k, Operator: corev1.TolerationOpEqual, Value: v, Effect: corev1.TaintEffectNoSchedule})
	}
	return out, true
}
