package validation

import (
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/doccheck"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/placement"
)

// unservedCapacity serves every term but those holding a label key in typos.
type unservedCapacity map[string]bool

func (u unservedCapacity) Tolerations(labels map[string]string) ([]corev1.Toleration, bool) {
	for k := range labels {
		if u[k] {
			return nil, false
		}
	}
	return nil, true
}

// typoHints names the likely typo of capcity-type.
type typoHints struct{}

func (typoHints) Hint(labels map[string]string) (string, bool) {
	if _, ok := labels["karpenter.sh/capcity-type"]; ok {
		return `no NodePool, node group or node offers the label key "karpenter.sh/capcity-type"; did you mean "karpenter.sh/capacity-type"?`, true
	}
	return `no NodePool, node group or node offers the label key "gpu"`, false
}

// Mistakes are loud at apply: a term with a likely typo is refused (warned in warn
// mode, or when an update keeps it), naming the closest key; a term nothing serves
// without a likely typo is warned; a strategy-like annotation key is warned; a
// Namespace default or policy where the webhook is not sent is warned.
func TestApplyTimeMistakes(t *testing.T) {
	const typo = "karpenter.sh/capacity-type=on-demand,base=1,weight=1:karpenter.sh/capcity-type=spot,weight=3"
	const unknown = "karpenter.sh/capacity-type=on-demand,base=1:gpu=true"
	capacity := unservedCapacity{"karpenter.sh/capcity-type": true, "gpu": true}
	enabled := map[string]map[string]string{testNS: {strategy.LabelNamespaceEnabled: "true"}, "dev": {}}
	scope := func(labels map[string]map[string]string) *NamespaceScope {
		return &NamespaceScope{
			WhyNot: func(ns string, nsLabels map[string]string, what string) string {
				if nsLabels[strategy.LabelNamespaceEnabled] == "true" {
					return ""
				}
				return strategy.NotEnabled(ns, what)
			},
			Each: func(fn func(string, map[string]string)) {
				for ns, l := range labels {
					fn(ns, l)
				}
			},
		}
	}
	v := &WorkloadValidator{Capacity: capacity, Hints: typoHints{}, Scope: scope(enabled), Metrics: webhook.NewMetrics(), Log: quietLog()}
	warn := &WorkloadValidator{Capacity: capacity, Hints: typoHints{}, WarnOnly: true, Metrics: webhook.NewMetrics(), Log: quietLog()}
	off := &WorkloadValidator{Capacity: capacity, Hints: typoHints{}, Scope: scope(map[string]map[string]string{testNS: {}, "dev": {}}), Metrics: webhook.NewMetrics(), Log: quietLog()}
	didYouMean := `did you mean "karpenter.sh/capacity-type"?`
	ann := func(s string) map[string]string { return map[string]string{strategy.AnnotationStrategy: s} }
	var said []string // every warning and refusal, for the catalogue
	for _, tc := range []struct {
		name     string
		v        *WorkloadValidator
		req      *admissionv1.AdmissionRequest
		allowed  bool
		mentions string
	}{
		{"typo'd key on a Deployment", v, deploymentRequest(t, admissionv1.Create, ann(typo), nil, nil), false, "term 2 (karpenter.sh/capcity-type=spot) of Deployment shop/web is served by no NodePool, node group or Ready node; its pods may stay Pending: " + "no NodePool, node group or node offers the label key \"karpenter.sh/capcity-type\"; " + didYouMean},
		{"typo'd key, warn mode", warn, deploymentRequest(t, admissionv1.Create, ann(typo), nil, nil), true, didYouMean},
		{"typo'd key kept by an update", v, deploymentRequest(t, admissionv1.Update, ann(typo), nil, ann(typo)), true, didYouMean},
		{"unknown key, no likely typo: warned", v, deploymentRequest(t, admissionv1.Create, ann(unknown), nil, nil), true, `offers the label key "gpu"`},
		{"strategy-like annotation key", v, deploymentRequest(t, admissionv1.Create, map[string]string{"CustomPodSchedulingStrategy": typo}, nil, nil), true, `annotation "CustomPodSchedulingStrategy" is not read; did you mean "CustomPodScheduleStrategy"?`},
		{"move window that does not parse", v, deploymentRequest(t, admissionv1.Create, map[string]string{strategy.AnnotationStrategy: burstStrategy, strategy.AnnotationMoveWindow: "schedule=0 2 * * *; duraton=3h"}, nil, nil), true,
			`custom-kube-scheduler-webhook.io/move-window on Deployment shop/web: move window "schedule=0 2 * * *; duraton=3h": unknown part "duraton"`},
		{"move-window-like annotation key", v, deploymentRequest(t, admissionv1.Create, map[string]string{strategy.AnnotationStrategy: burstStrategy, "custom-kube-scheduler-webhook.io/move-windows": "always"}, nil, nil), true,
			`annotation "custom-kube-scheduler-webhook.io/move-windows" is not read; did you mean "custom-kube-scheduler-webhook.io/move-window"?`},
		{"typo'd key in a PlacementPolicy", v, policyRequest(t, admissionv1.Create, v1alpha1.KindPlacementPolicy, typo, ""), false, didYouMean},
		{"typo'd key in a ClusterPlacementPolicy", v, policyRequest(t, admissionv1.Create, v1alpha1.KindClusterPlacementPolicy, typo, ""), false, didYouMean},
		{"typo'd key in a Namespace default", v, namespaceRequest(t, admissionv1.Create, typo, ""), false, didYouMean},
		{"PlacementPolicy in a namespace not enabled", off, policyRequest(t, admissionv1.Create, v1alpha1.KindPlacementPolicy, burstStrategy, ""), true, "PlacementPolicy shop/split governs nothing: namespace shop is not enabled"},
		{"ClusterPlacementPolicy where no namespace is enabled", off, policyRequest(t, admissionv1.Create, v1alpha1.KindClusterPlacementPolicy, burstStrategy, ""), true, "ClusterPlacementPolicy split governs nothing: none of the namespaces it selects (dev, shop) is enabled"},
		{"Namespace default, namespace not enabled", off, namespaceRequest(t, admissionv1.Create, burstStrategy, ""), true, "the default strategy of Namespace shop governs nothing: namespace shop is not enabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := tc.v.Admit(context.Background(), tc.req)
			text := strings.Join(resp.Warnings, "\n")
			said = append(said, resp.Warnings...)
			if resp.Result != nil {
				text += "\n" + resp.Result.Message
				said = append(said, resp.Result.Message)
			}
			if resp.Allowed != tc.allowed || !strings.Contains(text, tc.mentions) {
				t.Fatalf("allowed %v, want %v; answer %q does not say %q", resp.Allowed, tc.allowed, text, tc.mentions)
			}
		})
	}
	// The messages of the other apply-time faults, for the catalogue.
	said = append(said, v.Admit(context.Background(), deploymentRequest(t, admissionv1.Create, ann("spot=1,weight=x"), nil, nil)).Result.Message)
	said = append(said, v.AdmitNotEnabled(context.Background(), deploymentRequest(t, admissionv1.Create, ann(burstStrategy), nil, nil)).Warnings...)
	said = append(said, v.Admit(context.Background(), kindRequest(t, "batch", "Job", withAnnotations(ann("spot=1,weight=x"), nil), nil)).Warnings...)
	images := &placement.ImageArchitectures{Images: byImage{"amd64-only:1": {"amd64"}}, Capacity: fakeArchCapacity{"amd64", "arm64"}}
	arch := &WorkloadValidator{Metrics: webhook.NewMetrics(), Log: quietLog(), Images: images}
	said = append(said, arch.Admit(context.Background(), archDeployment(t, admissionv1.Create, "kubernetes.io/arch=arm64,weight=1:capacity=spot", "amd64-only:1", "")).Result.Message)
	checkCatalogue(t, said)

	// In an enabled namespace a valid policy says nothing about scope.
	resp := v.Admit(context.Background(), policyRequest(t, admissionv1.Create, v1alpha1.KindPlacementPolicy, burstStrategy, ""))
	if !resp.Allowed || len(resp.Warnings) != 0 {
		t.Errorf("a valid policy in an enabled namespace: %v %q", resp.Allowed, resp.Warnings)
	}
}

// checkCatalogue holds docs/messages.md's apply-time table to the messages said: each
// message matches a row (its prefix aside), and each row is
// said by some message.
func checkCatalogue(t *testing.T, said []string) {
	t.Helper()
	rows, err := doccheck.Table("../../docs/messages.md", "At apply")
	if err != nil {
		t.Fatal(err)
	}
	used := make([]bool, len(rows))
	for _, msg := range said {
		msg = strings.TrimPrefix(msg, "custom-kube-scheduler-webhook: ")
		found := false
		for i, row := range rows {
			if doccheck.Pattern(row[0]).MatchString(msg) {
				used[i], found = true, true
			}
		}
		if !found {
			t.Errorf("docs/messages.md has no row for the message %q", msg)
		}
	}
	for i, row := range rows {
		if !used[i] {
			t.Errorf("docs/messages.md row %q matches no message the validator says", row[0])
		}
	}
}
