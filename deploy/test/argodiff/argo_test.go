package main

import (
	"fmt"
	"testing"

	"github.com/argoproj/gitops-engine/pkg/diff"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// obj decodes a YAML object.
func obj(t *testing.T, s string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(s), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// modified runs Argo CD's diff as run does.
func modified(t *testing.T, config, live *unstructured.Unstructured) bool {
	t.Helper()
	r, err := diff.Diff(config, live, diff.WithNormalizer(diff.GetNoopNormalizer()))
	if err != nil {
		t.Fatal(err)
	}
	return r.Modified
}

const cfg = `
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: x, labels: {a: b}}
webhooks:
- name: pods.x
  admissionReviewVersions: [v1]
  clientConfig: {service: {name: s, namespace: n, port: 443%s}}
  sideEffects: None
`

// Argo CD's diff ignores what only the live object has (the webhook's path and
// caBundle, the API server's defaults, Helm's annotations), finds a rendered path that
// differs, and compares quantities in canonical form.
func TestArgoDiff(t *testing.T) {
	live := obj(t, `
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: x, labels: {a: b}, annotations: {meta.helm.sh/release-name: r}, resourceVersion: "5", uid: u}
webhooks:
- name: pods.x
  admissionReviewVersions: [v1]
  clientConfig: {caBundle: Zm9v, service: {name: s, namespace: n, port: 443, path: /abcdefghijklmnopqrstuvwxyz/mutate}}
  sideEffects: None
  timeoutSeconds: 10
  failurePolicy: Fail
`)
	for _, c := range []struct {
		extra string
		drift bool
	}{{"", false}, {", path: /mutate", true}} {
		if got := modified(t, obj(t, fmt.Sprintf(cfg, c.extra)), live); got != c.drift {
			t.Errorf("extra %q: modified %v, want %v", c.extra, got, c.drift)
		}
	}
	d := `
apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers:
      - name: c
        image: i
        resources: {requests: {cpu: %s}}
`
	if modified(t, obj(t, fmt.Sprintf(d, "1")), obj(t, fmt.Sprintf(d, "\"1000m\""))) {
		t.Error("cpu 1 and 1000m are drift")
	}
	if !modified(t, obj(t, fmt.Sprintf(d, "2")), obj(t, fmt.Sprintf(d, "\"1\""))) {
		t.Error("cpu 2 against 1 is not drift")
	}
}
