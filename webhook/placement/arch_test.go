package placement

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/imagearch"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/testregistry"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/internal/webhooktest"
)

func TestArchitectureRequirementMergesIntoTheAffinity(t *testing.T) {
	archIn := func(v ...string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: v}
	}
	zone := corev1.NodeSelectorRequirement{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}
	field := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"n1"}}
	preferred := []corev1.PreferredSchedulingTerm{{Weight: 1, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{zone}}}}
	podAffinity := &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: "zone"}}}
	required := func(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
	}
	for _, tc := range []struct {
		name     string
		affinity *corev1.Affinity
		want     []corev1.NodeSelectorTerm
	}{
		{"no affinity", nil, []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{archIn("amd64")}}}},
		{"pod affinity only", &corev1.Affinity{PodAffinity: podAffinity}, []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{archIn("amd64")}}}},
		{"preferred node affinity only", &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: preferred}}, []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{archIn("amd64")}}}},
		{"empty required terms", required(), []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{archIn("amd64")}}}},
		{"added to every term, kept in order", required(
			corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{zone}},
			corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{field}},
		), []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{zone, archIn("amd64")}},
			{MatchExpressions: []corev1.NodeSelectorRequirement{archIn("amd64")}, MatchFields: []corev1.NodeSelectorRequirement{field}},
		}},
		{"a term holding it already is left alone", required(
			corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{archIn("amd64")}},
			corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{zone}},
		), []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{archIn("amd64")}},
			{MatchExpressions: []corev1.NodeSelectorRequirement{zone, archIn("amd64")}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"app": "x"}}, Spec: corev1.PodSpec{Affinity: tc.affinity.DeepCopy()}}
			patch, err := placementPatch(pod, map[string]string{"a/b~c": "1"}, nil, []string{"amd64"}, map[string]string{strategy.AnnotationSeat: "1"})
			if err != nil {
				t.Fatal(err)
			}
			got := patched(t, pod, patch)
			terms := requiredTerms(got)
			if !equalJSON(t, terms, tc.want) {
				b, _ := json.Marshal(terms)
				t.Errorf("terms %s", b)
			}
			if got.Spec.NodeSelector["a/b~c"] != "1" {
				t.Errorf("the escaped nodeSelector key was not added: %v", got.Spec.NodeSelector)
			}
			if tc.affinity != nil {
				if !equalJSON(t, got.Spec.Affinity.PodAffinity, tc.affinity.PodAffinity) ||
					(tc.affinity.NodeAffinity != nil && !equalJSON(t, got.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution, tc.affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution)) {
					t.Errorf("the pod's own affinity changed: %+v", got.Spec.Affinity)
				}
			}
			// Idempotent: the patched pod patched again gains no second requirement.
			again, err := placementPatch(got, nil, nil, []string{"amd64"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if string(again) != "null" && string(again) != "[]" {
				t.Errorf("patching the placed pod again: %s", again)
			}
		})
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// fakeImages answers a fixed set, or an error, or waits for the caller to give up.
type fakeImages struct {
	arches []string
	err    error
	block  bool
	calls  atomic.Int32
}

func (f *fakeImages) Architectures(ctx context.Context, req imagearch.Request) ([]string, error) {
	f.calls.Add(1)
	if f.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return f.arches, f.err
}

type fakeArchCapacity []string

func (f fakeArchCapacity) Architectures(map[string]string) []string { return f }

func TestArchitectureVerdict(t *testing.T) {
	both := fakeArchCapacity{"amd64", "arm64"}
	plain := strategy.Term{Labels: []strategy.Label{{Key: "capacity", Value: "spot"}}}
	arm := strategy.Term{Labels: []strategy.Label{{Key: corev1.LabelArchStable, Value: "arm64"}}}
	podWith := func(edit func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Image: "app:1"}}}}
		if edit != nil {
			edit(p)
		}
		return p
	}
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		term     strategy.Term
		capacity fakeArchCapacity
		images   *fakeImages
		outcome  string
		require  []string
		lookups  int32
		message  string // in the warning or the cannot-run message
	}{
		{"both offered, amd64-only image", podWith(nil), plain, both, &fakeImages{arches: []string{"amd64"}}, webhook.ArchRequired, []string{"amd64"}, 1, ""},
		{"both offered, multi-arch image", podWith(nil), plain, both, &fakeImages{arches: []string{"amd64", "arm64", "s390x"}}, webhook.ArchUnneeded, nil, 1, ""},
		{"one offered: no lookup", podWith(nil), plain, fakeArchCapacity{"amd64"}, &fakeImages{arches: []string{"arm64"}}, webhook.ArchSkipped, nil, 0, ""},
		{"the pod's nodeSelector pins it: no lookup", podWith(func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"beta.kubernetes.io/arch": "arm64"} }), plain, both, &fakeImages{arches: []string{"amd64"}}, webhook.ArchSkipped, nil, 0, ""},
		{"the pod's affinity pins it in every term: no lookup", podWith(func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"arm64"}}}}}}}}
		}), plain, both, &fakeImages{arches: []string{"amd64"}}, webhook.ArchSkipped, nil, 0, ""},
		{"the term pins an arch the images support", podWith(nil), arm, both, &fakeImages{arches: []string{"amd64", "arm64"}}, webhook.ArchUnneeded, nil, 1, ""},
		{"the term pins an arch the images lack", podWith(nil), arm, nil, &fakeImages{arches: []string{"amd64"}}, webhook.ArchCannotRun, nil, 1, "pins kubernetes.io/arch=arm64"},
		{"the capacity offers none the images support", podWith(nil), plain, both, &fakeImages{arches: []string{"s390x"}}, webhook.ArchCannotRun, nil, 1, "offers kubernetes.io/arch amd64, arm64"},
		{"the registry fails", podWith(nil), plain, both, &fakeImages{err: errors.New("registry down")}, webhook.ArchUnknown, nil, 1, "registry down"},
		{"the registry is slow: the budget ends the wait", podWith(nil), plain, both, &fakeImages{block: true}, webhook.ArchUnknown, nil, 1, "not known"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ia := &ImageArchitectures{Images: tc.images, Capacity: tc.capacity, Budget: 20 * time.Millisecond}
			v := ia.verdict(context.Background(), tc.pod, "ns", 0, tc.term, "Deployment ns/web")
			if v.outcome != tc.outcome || !slices.Equal(v.require, tc.require) || tc.images.calls.Load() != tc.lookups {
				t.Errorf("verdict %+v after %d lookups; want %s %v after %d", v, tc.images.calls.Load(), tc.outcome, tc.require, tc.lookups)
			}
			if !strings.Contains(v.warning+v.cannotRun, tc.message) {
				t.Errorf("message %q, want it to mention %q", v.warning+v.cannotRun, tc.message)
			}
		})
	}
}

// A pod whose term cannot run its images keeps its seat: placed, with a warning, an
// Event and the annotation spread reads.
func TestDecideKeepsTheSeatOfAPodItsTermCannotRun(t *testing.T) {
	s, err := strategy.Parse("kubernetes.io/arch=arm64,weight=1:capacity=spot,weight=1")
	if err != nil {
		t.Fatal(err)
	}
	w := &clusterview.Workload{Ref: corev1.ObjectReference{Kind: "Deployment", Namespace: "demo", Name: "web"}, Revision: "rs"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Image: "app:1"}}}}
	ia := &ImageArchitectures{Images: &fakeImages{arches: []string{"amd64"}}, Capacity: fakeArchCapacity{"amd64", "arm64"}}
	for seat, want := range map[int]struct {
		term      string
		cannotRun bool
		arch      []string
	}{2: {"1", true, nil}, 1: {"2", false, []string{"amd64"}}} {
		d := decide(decisionInput{Pod: pod, Workload: w, Strategy: s, Seat: seat, Admission: "uid",
			Arch: func(i int, term strategy.Term) archVerdict {
				return ia.verdict(context.Background(), pod, "demo", i, term, w.Describe())
			}})
		if d.Outcome != webhook.OutcomePlaced {
			t.Fatalf("seat %d: outcome %s (%v)", seat, d.Outcome, d.Warnings)
		}
		got := patched(t, pod, d.Patch)
		if got.Annotations[strategy.AnnotationTerm] != want.term {
			t.Errorf("seat %d: term %s, want %s", seat, got.Annotations[strategy.AnnotationTerm], want.term)
		}
		msg, marked := got.Annotations[strategy.AnnotationCannotRun]
		if marked != want.cannotRun {
			t.Errorf("seat %d: cannot-run annotation %q, want it: %v", seat, msg, want.cannotRun)
		}
		if want.cannotRun && (len(d.Events) != 1 || d.Events[0][0] != reasonImageArchitecture || !slices.ContainsFunc(d.Warnings, func(s string) bool { return strings.Contains(s, "will not start") })) {
			t.Errorf("seat %d: events %v, warnings %v", seat, d.Events, d.Warnings)
		}
		var arch []string
		for _, term := range requiredTerms(got) {
			for _, r := range term.MatchExpressions {
				if r.Key == corev1.LabelArchStable {
					arch = r.Values
				}
			}
		}
		if !slices.Equal(arch, want.arch) {
			t.Errorf("seat %d: arch requirement %v, want %v", seat, arch, want.arch)
		}
	}
}

// BenchmarkAdmitImageArchitectures is BenchmarkAdmit with the architecture step on
// and warm: a real imagearch.Resolver whose cache holds the pod's image (read once from
// go-containerregistry's in-memory registry), on capacity offering amd64 and arm64, so
// that every admission looks the image up and adds the requirement.
func BenchmarkAdmitImageArchitectures(b *testing.B) {
	m, _, _ := newCluster(burstStrategy).mutator(b)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	b.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	image := host + "/app:1"
	testregistry.PushImage(b, image, testregistry.PlatformImage(b, "amd64"))
	m.Images = &ImageArchitectures{Images: imagearch.New(imagearch.Config{Insecure: []string{host}}), Capacity: fakeArchCapacity{"amd64", "arm64"}}
	pod := webhooktest.RSPod(testNS, testRSUID)
	pod.Spec.Containers[0].Image = image
	req := webhooktest.CreateRequest(b, pod)
	b.ReportAllocs()
	for b.Loop() {
		req.UID = uuid.NewUUID()
		resp := m.Admit(context.Background(), req)
		if !bytes.Contains(resp.Patch, []byte(corev1.LabelArchStable)) {
			b.Fatalf("no architecture requirement: %s %v", resp.Patch, resp.Warnings)
		}
		m.Ledger.Release(context.Background(), clusterview.Revision{Namespace: testNS, UID: testRSUID}, req.UID)
	}
}
