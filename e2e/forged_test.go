//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// A caller on the cluster network that knows a one-replica Deployment's revision
// re-sends a forged pair of AdmissionReviews for it every 500 ms, at /mutate and at
// guessed paths, starting before the real pod exists. It never learns the admission
// token in the webhook configuration's path, so no forged review is answered and the
// real pod lands on seat 1 (its on-demand base), not on a spot seat.
func TestForgedReviewsResentEvery500msTakeNoSeat(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "e2e-forged")
	d := deployment(ns, "shop", seedStrategy, 0, true)
	createDeployment(ctx, t, d)
	rs := replicaSetOf(ctx, t, ns, d)

	f := &forger{base: fmt.Sprintf("https://127.0.0.1:%d", env.webhook.Port), rs: rs,
		client: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}} //nolint:gosec // the attacker verifies nothing
	forgeCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { f.run(forgeCtx, t) })
	t.Cleanup(func() { stop(); wg.Wait() })
	// The forgery is under way before the real pod's admission, and keeps going after.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return f.rounds.Load() >= 3, nil
	}); err != nil {
		t.Fatalf("the forger sent %d rounds: %v", f.rounds.Load(), err)
	}
	scaleDeployment(ctx, t, ns, d.Name, 1)
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := env.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=shop"})
		if err != nil || len(list.Items) == 0 {
			return false, nil
		}
		pod = &list.Items[0]
		return true, nil
	})
	if err != nil {
		t.Fatalf("the real pod was not created: %v", err)
	}
	rounds := f.rounds.Load()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return f.rounds.Load() >= rounds+3, nil
	}); err != nil {
		t.Fatalf("the forger stopped early: %v", err)
	}
	stop()
	wg.Wait()
	if seat := pod.Annotations[strategy.AnnotationSeat]; seat != "1" {
		t.Fatalf("the real pod got seat %q, want 1: forged reviews took its seat", seat)
	}
	if n := f.answered.Load(); n != 0 {
		t.Fatalf("%d forged reviews were answered (of %d sent)", n, f.sent.Load())
	}
	if f.sent.Load() == 0 || f.refused.Load() != f.sent.Load() {
		t.Fatalf("forged reviews: %d sent, %d refused with 404: the test proves nothing", f.sent.Load(), f.refused.Load())
	}
	t.Logf("%d forged reviews in %d rounds, every one refused with 404; the real pod has seat 1", f.sent.Load(), f.rounds.Load())
}

// forger re-sends a pair of forged reviews for rs's revision every 500 ms, for at most
// two minutes.
type forger struct {
	base                   string
	rs                     *appsv1.ReplicaSet
	client                 *http.Client
	rounds, sent, answered atomic.Int64
	refused                atomic.Int64
}

// paths are where the forger tries: the plain paths and guessed tokens.
var forgedPaths = []string{"/mutate", "/validate", "/token/mutate", "/custom-kube-scheduler-webhook/mutate"}

func (f *forger) run(ctx context.Context, t *testing.T) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(2 * time.Minute)
	for {
		for i := range 2 {
			body := f.review(t, i)
			for _, p := range forgedPaths {
				f.send(ctx, p, body)
			}
		}
		f.rounds.Add(1)
		select {
		case <-ctx.Done():
			return
		case <-deadline:
			return
		case <-tick.C:
		}
	}
}

func (f *forger) send(ctx context.Context, path string, body []byte) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.base+path, bytes.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	f.sent.Add(1)
	switch resp.StatusCode {
	case http.StatusOK:
		f.answered.Add(1)
	case http.StatusNotFound:
		f.refused.Add(1)
	}
}

// review is forged pod i of the pair: a pod of rs, as the ReplicaSet controller would
// create it, under a fresh admission UID.
func (f *forger) review(t *testing.T, i int) []byte {
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: f.rs.Name + "-", Namespace: f.rs.Namespace, Labels: f.rs.Spec.Template.Labels,
			Annotations:     f.rs.Spec.Template.Annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: f.rs.Name, UID: f.rs.UID, Controller: ptr(true)}},
		},
		Spec: f.rs.Spec.Template.Spec,
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Errorf("encoding a forged pod: %v", err)
		return nil
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID(fmt.Sprintf("forged-%d-%s", i, rand.Text())),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: f.rs.Namespace, Operation: admissionv1.Create,
			Object: runtime.RawExtension{Raw: raw},
		},
	}
	body, err := json.Marshal(review)
	if err != nil {
		t.Errorf("encoding a forged review: %v", err)
	}
	return body
}
