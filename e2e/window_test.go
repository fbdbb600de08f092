//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/harness"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/unavailability"
)

// returnStrategy puts seat 1 on spot (the larger weight), so a dry-run pod of a
// Deployment with no replicas shows whether the webhook sees spot unavailable.
const returnStrategy = "karpenter.sh/capacity-type=on-demand,weight=1:karpenter.sh/capacity-type=spot,weight=3"

// onFallback creates a Deployment of returnStrategy with the given annotations and
// replicas pods placed while spot is recorded unavailable (an unavailability record as
// the loop writes it), so its spot seats run on on-demand. It returns the settled pods
// and a func that deletes the record: capacity is back, and the loop wants to return
// them.
func onFallback(ctx context.Context, t *testing.T, ns, name string, replicas int, annotations map[string]string) ([]corev1.Pod, func()) {
	t.Helper()
	d := deployment(ns, name, returnStrategy, 0, false)
	for k, v := range annotations {
		d.Annotations[k] = v
	}
	createDeployment(ctx, t, d)
	rs := replicaSetOf(ctx, t, ns, d)
	writeUnavailability(ctx, t, ns, name, 2)
	// The webhook places by its own watch of the records: wait until it sees this one.
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pr := dryRunPods(ctx, t, rs, []string{rs.Spec.Template.Spec.Containers[0].Image})[0]
		return pr.err == nil && pr.pod.Annotations[strategy.AnnotationFallbackFrom] == "2", nil
	}); err != nil {
		t.Fatalf("the webhook never placed a pod of %s/%s on fallback: %v", ns, name, err)
	}
	scaleDeployment(ctx, t, ns, name, replicas)
	pods := settled(ctx, t, ns, name, replicas)
	fallback := 0
	for _, p := range pods {
		if p.Annotations[strategy.AnnotationFallbackFrom] == "2" {
			fallback++
		}
	}
	if want := spotSeats(t, replicas); fallback != want {
		t.Fatalf("%d pods of %s/%s on fallback, want every spot seat (%d)", fallback, ns, name, want)
	}
	return pods, func() {
		if err := env.client.CoordinationV1().Leases(webhookNamespace).Delete(ctx, unavailability.RecordName(rs.UID), metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting the unavailability record: %v", err)
		}
	}
}

// annotate merge-patches the Deployment's annotations (a nil value removes one).
func annotate(ctx context.Context, t *testing.T, ns, name string, annotations map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if _, err := env.client.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotating %s/%s: %v", ns, name, err)
	}
}

// waitBlocked waits for a ConvergeBlocked Event on the Deployment that contains want.
func waitBlocked(ctx context.Context, t *testing.T, ns, name, want string) string {
	t.Helper()
	var got []string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got = eventsWith(ctx, t, ns, name, "ConvergeBlocked")
		for _, m := range got {
			if strings.Contains(m, want) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%s/%s: no ConvergeBlocked Event says %q: %q", ns, name, want, got)
	}
	for _, m := range got {
		if strings.Contains(m, want) {
			return m
		}
	}
	return ""
}

// A return waits for its window: held while the window is closed (one that never opens
// during the test), then, the window set to one that opened a minute ago in
// Asia/Kolkata's time (read as UTC it would be closed), the pods return and the
// Deployment ends exact, none evicted before. One pod carries
// karpenter.sh/do-not-disrupt: it stays on its fallback through the return and goes
// home once the annotation is removed. A window still to open is held by the same
// gate as the closed one; the pass at its opening is the requeue at the gate's "until"
// that TestReturnWaitsForMinimumStay sees at a stay's end, and when it opens is
// converge's and strategy's unit tests' (a window opening during the test cost 20-80 s).
func TestReturnWaitsForItsWindow(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "e2e-window")
	p := startConverger(ctx, t, "converge-window", 60)
	const replicas = 4
	closed := "schedule=0 0 1 1 *; duration=1m"
	pods, capacityBack := onFallback(ctx, t, ns, "windowed", replicas, map[string]string{strategy.AnnotationMoveWindow: closed})
	var pinned corev1.Pod
	for _, pod := range pods {
		if pod.Annotations[strategy.AnnotationFallbackFrom] == "2" {
			pinned = pod
			setDoNotDisrupt(ctx, t, pod, "true")
			break
		}
	}
	capacityBack()
	waitBlocked(ctx, t, ns, "windowed", "moves wait for window")
	wl := spreadJSON(ctx, t, ns, "windowed")
	if !strings.Contains(fmt.Sprint(wl["waits"]), "wait for window") || !strings.Contains(fmt.Sprint(wl["moveWindow"]), "schedule=0 0 1 1 *") {
		t.Errorf("spread does not say the workload waits for its window: waits %q, moveWindow %q", wl["waits"], wl["moveWindow"])
	}
	waitMetric(ctx, t, p, "custom_kube_scheduler_webhook_converge_waiting_pods", harness.Labels{"for": "window"}, 1, time.Minute)

	// A window that opened at the start of the previous minute, for an hour (longer than
	// the waits below), written in a time zone half an hour off UTC.
	loc, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	opened := time.Now().Truncate(time.Minute).Add(-time.Minute)
	local := opened.In(loc)
	window := fmt.Sprintf("schedule=%d %d * * *; duration=1h; timeZone=Asia/Kolkata", local.Minute(), local.Hour())
	set := time.Now()
	annotate(ctx, t, ns, "windowed", map[string]any{strategy.AnnotationMoveWindow: window})
	waitStaying(ctx, t, ns, "windowed", pinned)
	setDoNotDisrupt(ctx, t, pinned, "")
	waitExact(ctx, t, ns, "windowed", returnStrategy, replicas, 4*time.Minute)

	evictions := auditEvictionsOf(t, ns)
	if len(evictions) < spotSeats(t, replicas) {
		t.Errorf("%d evictions, want one per pod on fallback at least", len(evictions))
	}
	for _, e := range evictions {
		if e.At.Before(set) {
			t.Errorf("pod %s evicted at %s, while the window was closed (the open one was set at %s)", e.Pod, e.At.Format(time.RFC3339Nano), set.Format(time.RFC3339Nano))
		}
	}
	t.Logf("open window set at %s; %d evictions, the first at %s", set.Format(time.RFC3339Nano), len(evictions), evictions[0].At.Format(time.RFC3339Nano))
}

// A return waits for the minimum stay on fallback: held while the stay is an hour,
// then, the stay cut to end a little ahead, no pod is evicted before its own stay
// ends, and the Deployment ends exact.
func TestReturnWaitsForMinimumStay(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "e2e-stay")
	p := startConverger(ctx, t, "converge-stay", 61)
	const replicas = 4
	pods, capacityBack := onFallback(ctx, t, ns, "staying", replicas, map[string]string{strategy.AnnotationMinFallbackStay: "1h"})
	capacityBack()
	waitBlocked(ctx, t, ns, "staying", "returns wait for the minimum stay on fallback of 1h0m0s")
	waitMetric(ctx, t, p, "custom_kube_scheduler_webhook_converge_waiting_pods", harness.Labels{"for": "min-fallback-stay"}, 1, time.Minute)

	// A stay that ends 10 s from now for the youngest pod: the loop passes the workload
	// on the annotation's change within its interval (2 s), inside the stay.
	created := map[string]time.Time{}
	var youngest time.Time
	for _, pod := range pods {
		created[pod.Name] = pod.CreationTimestamp.Time
		if pod.CreationTimestamp.After(youngest) {
			youngest = pod.CreationTimestamp.Time
		}
	}
	stay := (time.Since(youngest) + 10*time.Second).Round(time.Second)
	annotate(ctx, t, ns, "staying", map[string]any{strategy.AnnotationMinFallbackStay: stay.String()})
	waitExact(ctx, t, ns, "staying", returnStrategy, replicas, 4*time.Minute)

	evictions := auditEvictionsOf(t, ns)
	if len(evictions) == 0 {
		t.Fatalf("no eviction, yet the pods returned")
	}
	for _, e := range evictions {
		c, ok := created[e.Pod]
		if !ok {
			continue // a replacement of a pod evicted earlier
		}
		if e.At.Before(c.Add(stay)) {
			t.Errorf("pod %s evicted at %s, before its minimum stay of %s ended at %s", e.Pod, e.At.Format(time.RFC3339Nano), stay, c.Add(stay).Format(time.RFC3339Nano))
		}
	}
	t.Logf("stay %s; %d evictions: %v", stay, len(evictions), evictions)
}

// spotSeats is how many of replicas seats returnStrategy places on spot.
func spotSeats(t *testing.T, replicas int) int {
	t.Helper()
	s, err := strategy.Parse(returnStrategy)
	if err != nil {
		t.Fatal(err)
	}
	return s.Target(replicas)[1]
}
