//go:build bench

package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// registeredHook is the name of the MutatingWebhookConfiguration register-webhook.sh writes.
const registeredHook = "custom-kube-scheduler-webhook"

// startFloor runs two floorhook processes on port and port+1 behind a round-robin proxy
// on port+2, and registers them for floorNS and floorWatchNS with serve's pod webhook
// configuration (rules, timeout, objectSelector, matchConditions) copied from the API
// server.
func (b *bench) startFloor(ctx context.Context, t *testing.T, bin string, port int) error {
	for i := range 2 {
		// The harness starts any binary as "<bin> serve" with serve's TLS and listen
		// settings; floorhook ignores the argument. The name must start with
		// "webhook" for the cluster's down.sh to stop it if the benchmark dies.
		// GOGC and GOMEMLIMIT as serve; the pod cache is of floorWatchNS only, so it
		// sees the pods of the floor-with-watch bursts alone.
		s := b.c.NewServe(bin, fmt.Sprintf("webhook-floor-%d", i+1), port+i, chartGOGC, chartGOMEMLIMIT, "WATCH_NAMESPACE="+floorWatchNS)
		if err := s.Start(ctx); err != nil {
			return err
		}
		b.floors = append(b.floors, s)
		t.Cleanup(func() {
			if err := s.Stop(); err != nil {
				t.Errorf("stopping %s: %v", s.Name, err)
			}
		})
	}
	proxy, err := b.c.StartProxy(port+2, port, port+1)
	if err != nil {
		return err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = proxy.Close(ctx)
	})

	hooks := b.c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	served, err := hooks.Get(ctx, registeredHook, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading serve's webhook configuration: %w", err)
	}
	// With scope opt-in there is an entry per namespace label; they differ only in the
	// namespaceSelector, which the floor replaces: the first gives the call filters.
	if len(served.Webhooks) == 0 {
		return fmt.Errorf("serve's webhook configuration has no webhooks")
	}
	hook := *served.Webhooks[0].DeepCopy()
	hook.Name = floorHook
	url := fmt.Sprintf("https://127.0.0.1:%d/mutate", port+2)
	hook.ClientConfig.URL = &url
	hook.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: []string{floorNS, floorWatchNS},
	}}}
	floor := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: floorHook},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{hook},
	}
	if err := hooks.Delete(ctx, floorHook, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting an earlier floor configuration: %w", err)
	}
	if _, err := hooks.Create(ctx, floor, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("registering the floor webhook: %w", err)
	}
	t.Cleanup(func() { _ = hooks.Delete(context.Background(), floorHook, metav1.DeleteOptions{}) })
	return b.waitFloorCalled(ctx)
}

// waitFloorCalled waits until the API server calls the floor: a server-side dry-run
// create of a pod with a strategy and a controller comes back with a seat.
func (b *bench) waitFloorCalled(ctx context.Context) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "floor-canary-",
			Namespace:    floorNS,
			Annotations:  map[string]string{"CustomPodScheduleStrategy": burstStrategy},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "floor-canary",
				UID: types.UID("00000000-0000-0000-0000-00000000f100"), Controller: ptr(true),
			}},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "canary", Image: "registry.k8s.io/pause:3.10"}}},
	}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := b.c.Client.CoreV1().Pods(floorNS).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			last = err
			return false, nil
		}
		_, seated := got.Annotations[strategy.AnnotationSeat]
		return seated && got.Spec.NodeSelector["karpenter.sh/capacity-type"] != "", nil
	})
	if err != nil {
		return fmt.Errorf("the API server does not call the floor webhook (last error: %v): %w", last, err)
	}
	return nil
}
