//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	port := env.webhook.port + 1
	old := env.webhook.replica(port, filepath.Join(env.dir, "logs", "webhook-e2e-rollout-old.log"))
	old.env = append(old.env, "SHUTDOWN_DRAIN="+drain.String()) // the last value wins
	if err := old.start(ctx); err != nil {
		t.Fatalf("starting the replica to roll: %v", err)
	}
	t.Cleanup(func() { _ = old.stop() })
	lb := startBalancer(t, env.webhook.port+2, env.webhook.port, port)
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
	if err := old.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case err := <-old.done:
		old.cmd = nil
		if err != nil {
			t.Errorf("the old replica exited with %v", err)
		}
	case <-time.After(drain + 20*time.Second):
		t.Fatal("the old replica did not exit after its drain")
	}
	exited := time.Since(sigterm)
	if exited < drain {
		t.Errorf("the old replica exited %v after SIGTERM, before its %v drain", exited, drain)
	}
	successor := env.webhook.replica(port, filepath.Join(env.dir, "logs", "webhook-e2e-rollout-new.log"))
	if err := successor.start(ctx); err != nil {
		t.Fatalf("starting the successor: %v", err)
	}
	t.Cleanup(func() { _ = successor.stop() })

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
	t.Logf("rollout: SIGTERM after %d admissions, old replica exited %v later; %d admissions per backend %v, %d failed at the balancer; unplaced pods %d of %d",
		atSignal, exited.Round(time.Millisecond), lb.total()-baseline, lb.served(), lb.Failed(), unplaced, len(list.Items))
	if unplaced != 0 || lb.Failed() != 0 {
		t.Errorf("%d pods unplaced, %d admissions failed during the webhook rollout; want 0", unplaced, lb.Failed())
	}
	assertExactSpread(ctx, t, capacityStrategy, pods)
}
