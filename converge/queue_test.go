package converge

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// runLoop runs w's loop, passing a changed revision after interval, until the test
// ends.
func runLoop(t *testing.T, w *world, interval time.Duration) {
	t.Helper()
	w.loop.cfg.Interval = interval
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.loop.Run(ctx, nil); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// passes counts the loop's revision passes by outcome.
func passes(w *world, outcome string) float64 {
	return testutil.ToFloat64(w.loop.cfg.Metrics.passes.WithLabelValues(outcome))
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// A revision at its placement with nothing waiting is passed once, then not again
// until one of its pods changes: an idle cluster costs no passes.
func TestSettledRevisionIsPassedOnlyOnChange(t *testing.T) {
	w := newWorld(t, 2, []*corev1.Pod{pod(1, 1, "on-demand", true, 0), pod(2, 2, "spot", true, 0)})
	const interval = 20 * time.Millisecond
	runLoop(t, w, interval)
	waitFor(t, "first pass", func() bool { return passes(w, "settled") == 1 })
	time.Sleep(20 * interval)
	if got := passes(w, "settled") + passes(w, "unsettled") + passes(w, "retried"); got != 1 {
		t.Fatalf("%v passes over an idle revision, want 1", got)
	}
	// A pod change queues its revision.
	ctx := context.Background()
	p, err := w.client.CoreV1().Pods(ns).Get(ctx, "web-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Conditions[0].Status = corev1.ConditionFalse
	p.ResourceVersion = "2" // the fake API server keeps what it is given; the informer skips an update with the same one
	if _, err := w.client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a pass after a pod changed", func() bool { return passes(w, "settled") == 2 })
	if got := w.evictions(); len(got) != 0 {
		t.Errorf("evicted %v", got)
	}
}

// A revision whose pods wait for a node is passed again every interval with no
// change, so FALLBACK_AFTER is noticed when it runs out: here the pods wait 30 s of a
// FALLBACK_AFTER of 20 s from the start, and the record is struck on the first pass.
func TestUnsettledRevisionIsPassedAgain(t *testing.T) {
	pods := waitingOnSpot(3, 5*time.Second)
	w := newWorld(t, 3, pods)
	runLoop(t, w, 20*time.Millisecond)
	waitFor(t, "passes again while pods wait", func() bool { return passes(w, "unsettled") >= 3 })
	if rec := w.records.Get(rsUID); rec != nil {
		t.Errorf("record %+v: pods waiting 5 s of 20 s struck their term", rec)
	}
}

// A deleted revision's record goes at once: the deletion queues the revision, which is
// then found gone.
func TestDeletedRevisionsRecordGoesOnTheEvent(t *testing.T) {
	pods := waitingOnSpot(3, 30*time.Second)
	w := newWorld(t, 3, pods)
	runLoop(t, w, 20*time.Millisecond)
	waitFor(t, "the stranded term's record", func() bool { return w.records.Get(rsUID) != nil })
	if err := w.client.AppsV1().ReplicaSets(ns).Delete(context.Background(), "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the record gone with its revision", func() bool { return w.records.Get(rsUID) == nil })
	if n := testutil.CollectAndCount(w.loop.cfg.Metrics.termTarget); n != 0 {
		t.Errorf("%d term_target_pods series left of a deleted revision, want 0", n)
	}
}
