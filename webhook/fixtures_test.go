package webhook

import (
	"context"
	"encoding/json"
	"io"
	"testing"

	"github.com/sirupsen/logrus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/utils/ptr"
)

func quietLog() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// stubHandlers serve admissions that place nothing: each pod review is answered with
// an empty patch (the HTTP side's tests need no placement; webhook/placement tests it).
func stubHandlers() *Handlers {
	patch := admissionv1.PatchTypeJSONPatch
	admit := func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		return &admissionv1.AdmissionResponse{Allowed: true, Patch: []byte("[]"), PatchType: &patch}
	}
	return &Handlers{Mutate: admit, Validate: admit, Ready: func() error { return nil }, Metrics: NewMetrics(), Log: quietLog()}
}

// rsPod is a pod of a ReplicaSet, as the ReplicaSet controller creates it.
func rsPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "web-5c4ff85997-", Namespace: "demo", Labels: map[string]string{"app": "web"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5c4ff85997", UID: "rs-uid", Controller: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "alpine"}}},
	}
}

// createRequest is the API server's review of creating pod.
func createRequest(t testing.TB, pod *corev1.Pod) *admissionv1.AdmissionRequest {
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
