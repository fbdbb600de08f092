// Package webhooktest holds the helpers the tests of webhook and its sub-packages share:
// a pod as the ReplicaSet controller creates it, the API server's review of creating it,
// and posting a review over HTTP. It is for tests only and imports nothing of the
// product.
package webhooktest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/utils/ptr"
)

// RSPod is a pod of the ReplicaSet web-5c4ff85997 (uid) in namespace, as the ReplicaSet
// controller creates it: generateName, no name.
func RSPod(namespace string, uid types.UID) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "web-5c4ff85997-", Namespace: namespace, Labels: map[string]string{"app": "web"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5c4ff85997", UID: uid, Controller: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "alpine"}}},
	}
}

// CreateRequest is the API server's review of creating pod.
func CreateRequest(t testing.TB, pod *corev1.Pod) *admissionv1.AdmissionRequest {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionRequest{
		UID: uuid.NewUUID(), Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: pod.Namespace, Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw},
	}
}

// Mutate posts a review of req to base's /mutate.
func Mutate(client *http.Client, base string, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	return PostReview(client, base+"/mutate", req)
}

// PostReview posts a review of req to the full URL and returns the response, checked
// to carry the request's UID. It may run on goroutines other than the test's, so it
// returns errors rather than failing the test.
func PostReview(client *http.Client, url string, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	review := admissionv1.AdmissionReview{Request: req}
	review.APIVersion, review.Kind = "admission.k8s.io/v1", "AdmissionReview"
	body, err := json.Marshal(review)
	if err != nil {
		return nil, fmt.Errorf("encode review: %w", err)
	}
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, errors.New(resp.Status)
	}
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("decode review: %w", err)
	}
	if out.Response == nil || out.Response.UID != req.UID {
		return nil, errors.New("response does not carry the request UID")
	}
	return out.Response, nil
}
