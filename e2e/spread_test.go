//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// The original project's sample: 10 replicas, strategy and opt-in on the Deployment itself.
func TestSeedDeploymentAt10(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "e2e-seed")
	d := deployment(ns, "alpine", seedStrategy, 10, false)
	d.Annotations[strategy.AnnotationOptIn] = "true"
	createDeployment(ctx, t, d)

	got := assertExactSpread(ctx, t, seedStrategy, settled(ctx, t, ns, d.Name, 10))
	if want := []int{1, 4, 5}; !slices.Equal(got, want) {
		t.Errorf("seed spread %v, want %v", got, want)
	}
}

// 200 replicas at once: the ReplicaSet controller creates them in concurrent bursts,
// admissions racing before any pod is visible. Then 200 -> 37: pod-deletion-cost
// makes the ReplicaSet controller remove the highest seats, so the survivors are
// exactly the target for 37, with no pod re-created.
func TestBurst200ThenScaleDownTo37(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "e2e-burst")
	d := deployment(ns, "burst", capacityStrategy, 200, true)
	createDeployment(ctx, t, d)

	before := settled(ctx, t, ns, d.Name, 200)
	assertExactSpread(ctx, t, capacityStrategy, before)
	if t.Failed() {
		t.FailNow()
	}

	scaleDeployment(ctx, t, ns, d.Name, 37)
	after := settled(ctx, t, ns, d.Name, 37)
	assertExactSpread(ctx, t, capacityStrategy, after)
	existed := podNames(before)
	for _, p := range after {
		if !existed[p.Name] {
			t.Errorf("pod %s was created during the scale-down; want only survivors of the 200", p.Name)
		}
	}
}

// A template change rolls out a new ReplicaSet; once done, the new revision alone
// holds the exact target (seats are counted per revision).
func TestRollingUpdate(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "e2e-rollout")
	d := deployment(ns, "web", seedStrategy, 12, true)
	createDeployment(ctx, t, d)
	old := settled(ctx, t, ns, d.Name, 12)
	assertExactSpread(ctx, t, seedStrategy, old)

	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"e2e/rollout":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	if _, err := env.client.AppsV1().Deployments(ns).Patch(ctx, d.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("changing the pod template: %v", err)
	}
	updated := settled(ctx, t, ns, d.Name, 12)
	oldNames := podNames(old)
	for _, p := range updated {
		if oldNames[p.Name] {
			t.Errorf("pod %s of the old revision survived the rollout", p.Name)
		}
	}
	assertExactSpread(ctx, t, seedStrategy, updated)
}

// A pod deleted by hand is replaced by a pod on the same seat, hence the same term. The
// ReplicaSet controller may create the replacement before the webhook's pod cache sees
// the deletion (under load): the replacement then takes the next free seat, above the
// replica count, and the convergence loop moves it onto the freed seat. Either way the
// seat is refilled on its term.
func TestDeletedPodReplacedOnSameTerm(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "e2e-replace")
	startConverger(ctx, t, "replace", 10)
	d := deployment(ns, "svc", seedStrategy, 10, true)
	createDeployment(ctx, t, d)
	before := settled(ctx, t, ns, d.Name, 10)
	assertExactSpread(ctx, t, seedStrategy, before)
	bySeat := podsBySeat(before)

	// Seat 1 is the on-demand base: a replacement that took any other free seat
	// would land on spot. Seat 6 is a spot seat in the middle of the sequence.
	s, err := strategy.Parse(seedStrategy)
	if err != nil {
		t.Fatalf("parsing strategy: %v", err)
	}
	victims := []int{1, 6}
	for _, seat := range victims {
		p, ok := bySeat[seat]
		if !ok {
			t.Fatalf("no pod holds seat %d", seat)
		}
		if err := env.client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting pod %s: %v", p.Name, err)
		}
	}
	waitExact(ctx, t, ns, d.Name, seedStrategy, 10, 2*time.Minute)
	after := settled(ctx, t, ns, d.Name, 10)
	assertExactSpread(ctx, t, seedStrategy, after)
	afterBySeat := podsBySeat(after)
	for _, seat := range victims {
		p, ok := afterBySeat[seat]
		switch {
		case !ok:
			t.Errorf("seat %d (term %d) was not refilled", seat, s.TermOfSeat(seat)+1)
		case p.Name == bySeat[seat].Name:
			t.Errorf("pod %s on seat %d was not replaced", p.Name, seat)
		case termOfSelector(s, strategy.PlacementSelector(&p)) != s.TermOfSeat(seat):
			t.Errorf("replacement %s for seat %d selects term %d, want term %d",
				p.Name, seat, termOfSelector(s, strategy.PlacementSelector(&p))+1, s.TermOfSeat(seat)+1)
		}
	}
}

// The webhook process is killed (SIGKILL) and restarted between two scale-ups; the
// restarted process rebuilds its seat ledger from the pods, so the second scale-up
// is still exact and no seat is handed out twice.
func TestWebhookRestartBetweenScaleUps(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "e2e-restart")
	d := deployment(ns, "api", capacityStrategy, 7, true)
	createDeployment(ctx, t, d)
	first := settled(ctx, t, ns, d.Name, 7)
	assertExactSpread(ctx, t, capacityStrategy, first)

	if err := env.webhook.Kill(); err != nil {
		t.Fatalf("killing the webhook: %v", err)
	}
	if err := env.webhook.Start(ctx); err != nil {
		t.Fatalf("restarting the webhook: %v", err)
	}

	scaleDeployment(ctx, t, ns, d.Name, 23)
	second := settled(ctx, t, ns, d.Name, 23)
	assertExactSpread(ctx, t, capacityStrategy, second)
	now := podsBySeat(second)
	for seat, p := range podsBySeat(first) {
		if now[seat].Name != p.Name {
			t.Errorf("seat %d moved from pod %s to %s across the restart", seat, p.Name, now[seat].Name)
		}
	}
}

// Pods in a namespace of BLOCKLISTED_NAMESPACE_LIST and DaemonSet pods are left
// untouched, even when they carry a strategy. Checked twice: with the webhook
// registered as the chart installs it (the API server filters these out), and
// with a minimal registration that sends every pod, so the webhook's own checks
// are what keeps them untouched.
func TestBlocklistedNamespaceAndDaemonSetNotMutated(t *testing.T) {
	ctx := context.Background()
	for _, filters := range []string{"full", "minimal"} {
		t.Run("registration="+filters, func(t *testing.T) {
			if filters != "full" {
				if err := env.register(ctx, filters); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					if err := env.register(context.Background(), "full"); err != nil {
						t.Errorf("restoring the full registration: %v", err)
					}
				})
			}

			// Blocklisted namespace: a Deployment with a valid strategy on its template.
			ns := newNamespace(ctx, t, blocklistedNamespace)
			d := deployment(ns, "blocked", seedStrategy, 3, true)
			d.Annotations = map[string]string{strategy.AnnotationStrategy: seedStrategy}
			createDeployment(ctx, t, d)
			assertNotMutated(t, settled(ctx, t, ns, d.Name, 3), d.Spec.Template)

			// DaemonSet with a strategy on the DaemonSet and its template: one pod per node.
			dsNS := newNamespace(ctx, t, "e2e-daemonset-"+filters)
			ds := &appsv1.DaemonSet{
				ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: dsNS, Annotations: map[string]string{strategy.AnnotationStrategy: seedStrategy}},
				Spec: appsv1.DaemonSetSpec{
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
					Template: podTemplate("agent", map[string]string{strategy.AnnotationStrategy: seedStrategy, strategy.AnnotationOptIn: "true"}),
				},
			}
			if _, err := env.client.AppsV1().DaemonSets(dsNS).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
				t.Fatalf("creating daemonset: %v", err)
			}
			assertNotMutated(t, daemonSetPods(ctx, t, dsNS, ds.Name), ds.Spec.Template)
		})
	}
}

// daemonSetPods waits until the DaemonSet runs a Ready pod on every node it wants
// (at least one), and returns its pods.
func daemonSetPods(ctx context.Context, t *testing.T, ns, name string) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	var state string
	err := wait.PollUntilContextTimeout(ctx, time.Second, settleTimeout, true, func(ctx context.Context) (bool, error) {
		ds, err := env.client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			state = err.Error()
			return false, nil
		}
		st := ds.Status
		state = fmt.Sprintf("desired %d, ready %d", st.DesiredNumberScheduled, st.NumberReady)
		if st.ObservedGeneration < ds.Generation || st.DesiredNumberScheduled == 0 || st.NumberReady != st.DesiredNumberScheduled {
			return false, nil
		}
		list, err := env.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			state = err.Error()
			return false, nil
		}
		pods = list.Items
		return len(pods) > 0, nil
	})
	if err != nil {
		t.Fatalf("daemonset %s/%s not ready: %v; last state: %s", ns, name, err, state)
	}
	return pods
}
