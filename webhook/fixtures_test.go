package webhook

import (
	"context"
	"io"

	"github.com/sirupsen/logrus"
	admissionv1 "k8s.io/api/admission/v1"
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
