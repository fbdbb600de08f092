package report

import (
	"context"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// PodWebhookName is the name of the pod webhook entry the chart and the local
// registration write; with scope opt-in a second entry carries a prefix
// ("original-label.") for the original project's namespace label.
const PodWebhookName = "pods.custom-kube-scheduler-webhook.io"

// Scope tells which namespaces the API server sends to the webhook, read from the pod
// webhook entries of the MutatingWebhookConfigurations.
type Scope struct {
	client    kubernetes.Interface
	selectors []labels.Selector
	// namespaces caches the labels of the namespaces read so far.
	namespaces map[string]labels.Set
	// Unseen says why the scope could not be told (nil when it could).
	Unseen []string
}

// ReadScope lists the MutatingWebhookConfigurations and keeps the pod webhook entries'
// namespaceSelectors. Without the right to list them, Scope.Unseen says so and
// NotEnabled reports nothing.
func ReadScope(ctx context.Context, client kubernetes.Interface) (*Scope, error) {
	s := &Scope{client: client, namespaces: map[string]labels.Set{}}
	list, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsForbidden(err):
		s.Unseen = []string{"webhook configurations (not allowed to list them): not told whether the namespaces are enabled for the webhook"}
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("list MutatingWebhookConfigurations: %w", err)
	}
	found := false
	for _, c := range list.Items {
		for _, w := range c.Webhooks {
			if w.Name != PodWebhookName && !strings.HasSuffix(w.Name, "."+PodWebhookName) {
				continue
			}
			found = true
			sel, err := namespaceSelector(w)
			if err != nil {
				return nil, fmt.Errorf("MutatingWebhookConfiguration %s, webhook %s: %w", c.Name, w.Name, err)
			}
			s.selectors = append(s.selectors, sel)
		}
	}
	if !found {
		s.Unseen = []string{"no MutatingWebhookConfiguration has the webhook " + PodWebhookName + ": is the webhook installed? Nothing places pods without it"}
	}
	return s, nil
}

func namespaceSelector(w admissionregistrationv1.MutatingWebhook) (labels.Selector, error) {
	if w.NamespaceSelector == nil {
		return labels.Everything(), nil
	}
	sel, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
	if err != nil {
		return nil, fmt.Errorf("namespaceSelector: %w", err)
	}
	return sel, nil
}

// NotEnabled returns, when the API server does not send the pods of namespace ns to the
// webhook, why and how to change it (what names the workload); "" when it does, or when
// that cannot be told (then unseen says why).
func (s *Scope) NotEnabled(ctx context.Context, ns, what string) (msg string, unseen string, err error) {
	if s.Unseen != nil && s.selectors == nil {
		return "", "", nil
	}
	set, ok := s.namespaces[ns]
	if !ok {
		obj, err := s.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		switch {
		case apierrors.IsForbidden(err):
			return "", fmt.Sprintf("namespace %s (not allowed to get it): not told whether it is enabled for the webhook", ns), nil
		case err != nil:
			return "", "", fmt.Errorf("get namespace %s: %w", ns, err)
		}
		set = labels.Set(obj.Labels)
		s.namespaces[ns] = set
	}
	for _, sel := range s.selectors {
		if sel.Matches(set) {
			return "", "", nil
		}
	}
	if set[strategy.LabelNamespaceEnabled] == "true" || set[strategy.LabelNamespaceEnabledOriginal] == "enabled" {
		return fmt.Sprintf("namespace %s is labelled but excluded by the webhook's namespaceSelector (blocklisted, the webhook's or Karpenter's namespace, or the chart's namespaceSelector), so nothing places the pods of %s", ns, what), "", nil
	}
	return strategy.NotEnabled(ns, what), "", nil
}
