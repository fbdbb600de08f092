package report

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
)

// Scope tells which namespaces the API server sends to the webhook, read from the pod
// webhook entries of the MutatingWebhookConfigurations (clusterview.ScopeRules, the rules
// the serving replicas' convergence loop and policy status follow too).
type Scope struct {
	client kubernetes.Interface
	rules  clusterview.ScopeRules
	// namespaces caches the labels of the namespaces read so far.
	namespaces map[string]map[string]string
	// Unseen says why the scope could not be told (nil when it could).
	Unseen []string
}

// ReadScope lists the MutatingWebhookConfigurations and keeps the pod webhook entries'
// call filters. Without the right to list them, Scope.Unseen says so and NotEnabled
// reports nothing.
func ReadScope(ctx context.Context, client kubernetes.Interface) (*Scope, error) {
	s := &Scope{client: client, namespaces: map[string]map[string]string{}}
	list, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsForbidden(err):
		s.Unseen = []string{"webhook configurations (not allowed to list them): not told whether the namespaces are enabled for the webhook"}
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("list MutatingWebhookConfigurations: %w", err)
	}
	for i := range list.Items {
		rules, err := clusterview.ScopeRulesOf(&list.Items[i])
		if err != nil {
			return nil, err
		}
		s.rules = s.rules.Merge(rules)
	}
	if !s.rules.Found() {
		s.Unseen = []string{"no MutatingWebhookConfiguration has the webhook " + clusterview.PodWebhookName + ": is the webhook installed? Nothing places pods without it"}
	}
	return s, nil
}

// NotEnabled returns, when the API server does not send the pods of namespace ns to the
// webhook, why and how to change it (what names the workload); "" when it does, or when
// that cannot be told (then unseen says why).
func (s *Scope) NotEnabled(ctx context.Context, ns, what string) (msg string, unseen string, err error) {
	if !s.rules.Found() {
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
		set = obj.Labels
		s.namespaces[ns] = set
	}
	if s.rules.CoversNamespace(set) {
		return "", "", nil
	}
	return clusterview.NotCoveredWhy(ns, set, what), "", nil
}
