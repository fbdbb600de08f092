package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/internal/webhooktest"
)

// oneToken opens the door to one token.
type oneToken string

func (o oneToken) Allows(t string) bool { return t != "" && t == string(o) }

// A caller that does not know the admission token, re-sending forged reviews for a
// revision as often as it likes, reaches no seat: every review on a path without the
// token is 404 and is never decoded or admitted, so the real pod takes seat 1. The API
// server's path (/<token>/mutate) is answered (webhook/placement seats it); /validate and the probes still work.
func TestForgedReviewsWithoutTheTokenHoldNoSeat(t *testing.T) {
	var admitted atomic.Int64
	h := stubHandlers()
	mutate := h.Mutate
	h.Mutate = func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		admitted.Add(1)
		return mutate(ctx, req)
	}
	h.Door = oneToken("s3cr3ttokenofthisinstall")
	url, _, _, client := startServer(t, h)

	forge := func(path string) int {
		req := webhooktest.CreateRequest(t, webhooktest.RSPod("demo", "rs-uid"))
		req.UID = types.UID("forged-" + path)
		return postStatus(t, client, url+path, req)
	}
	for range 10 {
		for _, path := range []string{"/mutate", "/validate", "/guess/mutate", "/s3cr3ttokenofthisinstal/mutate", "/S3CR3TTOKENOFTHISINSTALL/mutate"} {
			if code := forge(path); code != http.StatusNotFound {
				t.Fatalf("forged review at %s: HTTP %d, want 404", path, code)
			}
		}
	}
	if n := admitted.Load(); n != 0 {
		t.Fatalf("%d forged reviews were admitted", n)
	}
	real := webhooktest.CreateRequest(t, webhooktest.RSPod("demo", "rs-uid"))
	resp, err := webhooktest.PostReview(client, url+"/s3cr3ttokenofthisinstall/mutate", real)
	if err != nil {
		t.Fatalf("the API server's review: %v", err)
	}
	if !resp.Allowed || admitted.Load() != 1 {
		t.Fatalf("the real pod: %+v, admitted %d times; want allowed, once", resp, admitted.Load())
	}
	if code := forge("/s3cr3ttokenofthisinstall/validate"); code != http.StatusOK {
		t.Fatalf("validate at the token's path: HTTP %d", code)
	}
	if got := testutil.ToFloat64(h.Metrics.refused.WithLabelValues("mutate", "404")); got != 30 {
		t.Fatalf("admissions_refused_total{status=404} = %v, want the 30 forged reviews at a path with a wrong token (a plain path such as /mutate is no route at all)", got)
	}
}

// The not-enabled workloads' webhook sits behind the token too, at the path the token
// writer gives it (admissiontoken.Endpoint: /<token>/not-enabled).
func TestNotEnabledWebhookBehindTheToken(t *testing.T) {
	h := stubHandlers()
	var called atomic.Int64
	h.NotEnabled = func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		called.Add(1)
		return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	}
	h.Door = oneToken("s3cr3ttokenofthisinstall")
	url, _, _, client := startServer(t, h)
	post := func(path string) int {
		return postStatus(t, client, url+path, webhooktest.CreateRequest(t, webhooktest.RSPod("demo", "rs-uid")))
	}
	if code := post("/validate/not-enabled"); code != http.StatusNotFound {
		t.Errorf("/validate/not-enabled without the token: HTTP %d, want 404", code)
	}
	if code := post("/s3cr3ttokenofthisinstall/not-enabled"); code != http.StatusOK || called.Load() != 1 {
		t.Errorf("/<token>/not-enabled: HTTP %d, handler called %d times; want 200 and once", code, called.Load())
	}
	if code := post("/wrongtokenofthisinstall0/not-enabled"); code != http.StatusNotFound {
		t.Errorf("not-enabled with a wrong token: HTTP %d, want 404", code)
	}
}

// postStatus posts an AdmissionReview of req to url and returns the HTTP status.
func postStatus(t *testing.T, client *http.Client, url string, req *admissionv1.AdmissionRequest) int {
	t.Helper()
	review := admissionv1.AdmissionReview{Request: req}
	review.APIVersion, review.Kind = "admission.k8s.io/v1", "AdmissionReview"
	body, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode
}
