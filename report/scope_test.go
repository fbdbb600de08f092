package report

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
)

// The chart's opt-in entries: either label, never the excluded namespaces.
func TestScopeNotEnabled(t *testing.T) {
	excluded := metav1.LabelSelectorRequirement{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"blocked"}}
	entry := func(name string, terms ...metav1.LabelSelectorRequirement) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{Name: name, NamespaceSelector: &metav1.LabelSelector{MatchExpressions: append([]metav1.LabelSelectorRequirement{excluded}, terms...)}}
	}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "cksw"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			entry(clusterview.PodWebhookName, metav1.LabelSelectorRequirement{Key: "custom-kube-scheduler-webhook.io/enabled", Operator: metav1.LabelSelectorOpIn, Values: []string{"true"}}),
			entry("original-label."+clusterview.PodWebhookName,
				metav1.LabelSelectorRequirement{Key: "custom-kube-scheduler-webhook", Operator: metav1.LabelSelectorOpIn, Values: []string{"enabled"}},
				metav1.LabelSelectorRequirement{Key: "custom-kube-scheduler-webhook.io/enabled", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"true"}}),
		},
	}
	ns := func(name string, l map[string]string) *corev1.Namespace {
		all := map[string]string{"kubernetes.io/metadata.name": name}
		for k, v := range l {
			all[k] = v
		}
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: all}}
	}
	client := fake.NewClientset(cfg,
		ns("on", map[string]string{"custom-kube-scheduler-webhook.io/enabled": "true"}),
		ns("original", map[string]string{"custom-kube-scheduler-webhook": "enabled"}),
		ns("off", nil),
		ns("blocked", map[string]string{"custom-kube-scheduler-webhook.io/enabled": "true"}),
	)
	ctx := context.Background()
	s, err := ReadScope(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"on":       "",
		"original": "",
		"off":      "kubectl label namespace off custom-kube-scheduler-webhook.io/enabled=true",
		"blocked":  "labelled but excluded",
	} {
		msg, unseen, err := s.NotEnabled(ctx, name, "Deployment "+name+"/web")
		if err != nil || unseen != "" {
			t.Fatalf("%s: %v %q", name, err, unseen)
		}
		if (want == "") != (msg == "") || !strings.Contains(msg, want) {
			t.Errorf("namespace %s: got %q, want it to contain %q", name, msg, want)
		}
	}

	none, err := ReadScope(ctx, fake.NewClientset())
	if err != nil || len(none.Unseen) != 1 || !strings.Contains(none.Unseen[0], "is the webhook installed") {
		t.Errorf("no configuration: want it said, got %v %v", none.Unseen, err)
	}
}
