//go:build e2e

package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/harness"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// A rolling update of the webhook itself during a 200-pod burst: two replicas behind a
// balancer that, like a Service, sends requests only to Ready backends; one replica
// gets SIGTERM in the middle of the burst (readiness drops, it keeps serving through
// its drain period, finishes what is in flight, exits) and a new one takes its port.
// No admission may fail: every pod of the burst is placed.
func TestWebhookRolloutLeavesNoPodUnplaced(t *testing.T) {
	ctx := context.Background()
	const (
		replicas = 200
		drain    = 2 * time.Second
		// readiness is polled this often: endpoint removal reaches the API server
		// well within the drain period.
		probe = 100 * time.Millisecond
	)
	port := env.webhook.Port + 1
	old := env.newWebhook("webhook-e2e-rollout-old", port, "SHUTDOWN_DRAIN="+drain.String())
	if err := old.Start(ctx); err != nil {
		t.Fatalf("starting the replica to roll: %v", err)
	}
	t.Cleanup(func() { _ = old.Stop() })
	lb := startBalancer(t, env.webhook.Port+2, env.webhook.Port, port)
	lb.watchReadiness(t, probe)
	if err := env.registerAt(ctx, "full", lb.port); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.register(context.Background(), "full"); err != nil {
			t.Errorf("registering the single webhook again: %v", err)
		}
	})
	baseline := lb.total() // the registration canaries
	before, err := harness.APIServerMetrics(ctx, env.client)
	if err != nil {
		t.Fatal(err)
	}

	ns := newNamespace(ctx, t, "e2e-rollout")
	d := deployment(ns, "rollout", capacityStrategy, replicas, true)
	createDeployment(ctx, t, d)

	// Mid-burst: SIGTERM the old replica, then start its successor on the same port.
	deadline := time.Now().Add(2 * time.Minute)
	for lb.total()-baseline < replicas/4 {
		if time.Now().After(deadline) {
			t.Fatalf("the burst did not reach the webhook: %d admissions", lb.total()-baseline)
		}
		time.Sleep(5 * time.Millisecond)
	}
	atSignal := lb.total() - baseline
	sigterm := time.Now()
	state, err := old.Terminate(drain + 20*time.Second)
	switch {
	case errors.Is(err, harness.ErrNotExited):
		t.Fatal("the old replica did not exit after its drain")
	case err != nil:
		t.Fatalf("SIGTERM: %v", err)
	case state != nil && !state.Success():
		t.Errorf("the old replica exited with %v", state)
	}
	exited := time.Since(sigterm)
	if exited < drain {
		t.Errorf("the old replica exited %v after SIGTERM, before its %v drain", exited, drain)
	}
	successor := env.newWebhook("webhook-e2e-rollout-new", port)
	if err := successor.Start(ctx); err != nil {
		t.Fatalf("starting the successor: %v", err)
	}
	t.Cleanup(func() { _ = successor.Stop() })

	pods := settled(ctx, t, ns, d.Name, replicas)
	list, err := env.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unplaced := 0
	for _, p := range list.Items {
		if _, ok := p.Annotations[strategy.AnnotationSeat]; !ok {
			unplaced++
		}
	}
	h := admissionLatencySince(ctx, t, before)
	t.Logf("MEASURED graceful stop mid-burst: %.0f admissions at the API server, p50 %s, p99 %s",
		h.Count(), h.FormatQuantile(0.5), h.FormatQuantile(0.99))
	t.Logf("rollout: SIGTERM after %d admissions, old replica exited %v later; %d admissions per backend %v, %d failed at the balancer; unplaced pods %d of %d",
		atSignal, exited.Round(time.Millisecond), lb.total()-baseline, lb.served(), lb.Failed(), unplaced, len(list.Items))
	if unplaced != 0 || lb.Failed() != 0 {
		t.Errorf("%d pods unplaced, %d admissions failed during the webhook rollout; want 0 (SIGTERM at %s; %v)",
			unplaced, lb.Failed(), sigterm.Format("15:04:05.000"), lb.Failures())
	}
	assertExactSpread(ctx, t, capacityStrategy, pods)
}
