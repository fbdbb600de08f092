package validation

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/imagearch"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/placement"
)

// fakeArchCapacity offers the same architectures for every term.
type fakeArchCapacity []string

func (f fakeArchCapacity) Architectures(map[string]string) []string { return f }

// archDeployment is a review of a Deployment with a strategy and one container image.
func archDeployment(t *testing.T, op admissionv1.Operation, strat, image, oldImage string) *admissionv1.AdmissionRequest {
	t.Helper()
	encode := func(img string) []byte {
		d := appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: testNS, Annotations: map[string]string{strategy.AnnotationStrategy: strat}}}
		d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "app", Image: img}}
		raw, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	req := &admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
		Namespace: testNS, Name: "web", Operation: op, Object: runtime.RawExtension{Raw: encode(image)}}
	if oldImage != "" {
		req.OldObject = runtime.RawExtension{Raw: encode(oldImage)}
	}
	return req
}

// byImage answers per image name.
type byImage map[string][]string

func (b byImage) Architectures(_ context.Context, req imagearch.Request) ([]string, error) {
	var out []string
	for i, img := range req.Images {
		if i == 0 {
			out = b[img]
		} else {
			out = imagearch.Intersect(out, b[img])
		}
	}
	return out, nil
}

func TestValidationOfTermsThatCannotRunTheImages(t *testing.T) {
	images := &placement.ImageArchitectures{Images: byImage{"amd64-only:1": {"amd64"}, "multi:1": {"amd64", "arm64"}, "amd64-only:2": {"amd64"}}, Capacity: fakeArchCapacity{"amd64", "arm64"}}
	v := &WorkloadValidator{Metrics: webhook.NewMetrics(), Log: quietLog(), Images: images}
	ctx := context.Background()
	pinned := "kubernetes.io/arch=arm64,weight=1:capacity=spot"

	resp := v.Admit(ctx, archDeployment(t, admissionv1.Create, pinned, "amd64-only:1", ""))
	if resp.Allowed || !strings.Contains(resp.Result.Message, "term 1 (kubernetes.io/arch=arm64) of Deployment shop/web cannot run its pods' images: it pins kubernetes.io/arch=arm64, and they support only amd64") {
		t.Errorf("a term pinning an architecture the image lacks: %+v", resp.Result)
	}
	if resp := v.Admit(ctx, archDeployment(t, admissionv1.Create, pinned, "multi:1", "")); !resp.Allowed || len(resp.Warnings) != 0 {
		t.Errorf("a multi-arch image on an arm64 term: %+v", resp)
	}
	if resp := v.Admit(ctx, archDeployment(t, admissionv1.Update, pinned, "amd64-only:1", "amd64-only:1")); !resp.Allowed || len(resp.Warnings) != 1 {
		t.Errorf("an UPDATE keeping the strategy and the image must warn, not block: %+v", resp)
	}
	if resp := v.Admit(ctx, archDeployment(t, admissionv1.Update, pinned, "amd64-only:2", "multi:1")); resp.Allowed {
		t.Error("an image update that drops the pinned architecture is allowed")
	}
	warn := &WorkloadValidator{Metrics: webhook.NewMetrics(), Log: quietLog(), Images: images, WarnOnly: true}
	if resp := warn.Admit(ctx, archDeployment(t, admissionv1.Create, pinned, "amd64-only:1", "")); !resp.Allowed || len(resp.Warnings) != 1 {
		t.Errorf("warn mode: %+v", resp)
	}
	// A term left open whose capacity offers none of the image's architectures: a
	// warning (capacity changes), never a refusal.
	odd := &WorkloadValidator{Metrics: webhook.NewMetrics(), Log: quietLog(), Images: &placement.ImageArchitectures{Images: byImage{"s390x:1": {"s390x"}}, Capacity: fakeArchCapacity{"amd64", "arm64"}}}
	if resp := odd.Admit(ctx, archDeployment(t, admissionv1.Create, "capacity=spot", "s390x:1", "")); !resp.Allowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "offers kubernetes.io/arch amd64, arm64") {
		t.Errorf("capacity offering none of the image's architectures: %+v", resp)
	}
}
