//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/harness"
)

// Two webhook replicas behind a round-robin balancer, as behind a Service: a
// Deployment created at 200 replicas is still exact, although the concurrent
// admissions of one ReplicaSet are split between two processes, whose seat
// reservations are group-committed to one record per revision in the API server.
func TestTwoWebhookReplicasBurst200(t *testing.T) {
	ctx := context.Background()
	second := env.newWebhook("webhook-e2e-replica2", env.webhook.Port+1)
	if err := second.Start(ctx); err != nil {
		t.Fatalf("starting a second webhook replica: %v", err)
	}
	t.Cleanup(func() {
		if err := second.Stop(); err != nil {
			t.Errorf("stopping the second replica: %v", err)
		}
	})
	lb := startBalancer(t, env.webhook.Port+2, env.webhook.Port, second.Port)
	if err := env.registerAt(ctx, "full", lb.port); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.register(context.Background(), "full"); err != nil {
			t.Errorf("registering the single webhook again: %v", err)
		}
	})

	ns := newNamespace(ctx, t, "e2e-replicas")
	d := deployment(ns, "fanout", capacityStrategy, 200, true)
	createDeployment(ctx, t, d)
	assertExactSpread(ctx, t, capacityStrategy, settled(ctx, t, ns, d.Name, 200))
	for i, n := range lb.served() {
		if n == 0 {
			t.Errorf("replica %d served no admission: the burst did not exercise both replicas", i+1)
		}
	}
	t.Logf("admissions per replica (including canaries): %v", lb.served())
}

// balancer is the harness's round-robin proxy in front of webhook processes, as a
// Service would be (see harness.Proxy).
type balancer struct {
	*harness.Proxy
	port int
}

func (b *balancer) served() []int64 { return b.Served() }

func (b *balancer) total() int64 { return b.Total() }

// watchReadiness sends requests to the backends whose /readyz answers 200 first, polled
// each interval until the test ends.
func (b *balancer) watchReadiness(t *testing.T, interval time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := b.WatchReadiness(ctx, interval)
	t.Cleanup(func() { cancel(); <-stopped })
}

// startBalancer starts a round-robin proxy on port in front of the webhook
// processes on backends; it is closed when the test ends.
func startBalancer(t *testing.T, port int, backends ...int) *balancer {
	t.Helper()
	p, err := env.hc.StartProxy(port, backends...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("balancer: %v", err)
		}
	})
	return &balancer{Proxy: p, port: port}
}
