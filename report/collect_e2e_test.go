//go:build e2e

package report

// Collect on a real API server as a user who may read one namespace only: the report
// comes back, and says what it could not see (nodes, NodePools, the webhook's records).
//
//	KUBECONFIG=... go test -tags e2e -run TestE2E ./report/

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

func clients(t *testing.T, cfg *rest.Config) (kubernetes.Interface, dynamic.Interface) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs, dyn
}

func TestE2ECollectNamespaceScopedUser(t *testing.T) {
	kubeconfig := os.Getenv("KUBECONFIG")
	if kubeconfig == "" {
		t.Skip("KUBECONFIG not set")
	}
	adminCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	admin, adminDyn := clients(t, adminCfg)
	ctx := context.Background()

	ns, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "report-e2e-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })

	// The reader may read workloads and pods in this namespace, nothing else.
	if _, err := admin.CoreV1().ServiceAccounts(ns.Name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reader"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	read := []string{"get", "list", "watch"}
	if _, err := admin.RbacV1().Roles(ns.Name).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"apps"}, Resources: []string{"deployments", "statefulsets", "replicasets"}, Verbs: read},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: read},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns.Name).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "reader", Namespace: ns.Name}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{strategy.AnnotationStrategy: "karpenter.sh/capacity-type=on-demand,base=1:karpenter.sh/capacity-type=spot"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(0)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
	if _, err := admin.AppsV1().Deployments(ns.Name).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Its ReplicaSet (the revision the report counts) comes from the controller manager.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		rs, err := admin.AppsV1().ReplicaSets(ns.Name).List(ctx, metav1.ListOptions{})
		return err == nil && len(rs.Items) == 1, nil
	})
	if err != nil {
		t.Fatalf("no ReplicaSet for the Deployment: %v", err)
	}

	readerCfg := rest.CopyConfig(adminCfg)
	readerCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns.Name + ":reader"}
	reader, readerDyn := clients(t, readerCfg)
	opts := Options{Namespace: ns.Name, WebhookNamespace: "custom-kube-scheduler-webhook"}
	r, err := Collect(ctx, reader, readerDyn, opts)
	if err != nil {
		t.Fatalf("Collect as a user of one namespace: %v", err)
	}
	if len(r.Workloads) != 1 || r.Workloads[0].Name != "web" || len(r.Workloads[0].Terms) != 2 {
		t.Fatalf("workloads %+v, want web with 2 terms", r.Workloads)
	}
	unseen := strings.Join(r.Unseen, "\n")
	for _, want := range []string{"nodes (not allowed to list them)", "NodePools (not allowed to list them)", "unavailability records in namespace custom-kube-scheduler-webhook (not allowed to list them)",
		"Deployments in namespace custom-kube-scheduler-webhook (not allowed to list them): a move window set by the cluster's MOVE_WINDOW is not shown"} {
		if !strings.Contains(unseen, want) {
			t.Errorf("unseen %q lacks %q", r.Unseen, want)
		}
	}

	// An administrator sees nodes and NodePools, and the cluster's move window on the
	// webhook's Deployment (here one of a namespace of its own, never started).
	webhookNS, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "report-e2e-webhook-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Namespaces().Delete(context.Background(), webhookNS.Name, metav1.DeleteOptions{})
	})
	webhook := d.DeepCopy()
	webhook.Name, webhook.Annotations = "webhook", nil
	webhook.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "MOVE_WINDOW", Value: "schedule=0 2 * * *; duration=3h"}}
	if _, err := admin.AppsV1().Deployments(webhookNS.Name).Create(ctx, webhook, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	opts.WebhookNamespace = webhookNS.Name
	r, err = Collect(ctx, admin, adminDyn, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Workloads[0].MoveWindow, "schedule=0 2 * * *; duration=3h0m0s"; got != want {
		t.Errorf("administrator: move window %q, want the cluster's %q", got, want)
	}
	for _, u := range r.Unseen {
		if strings.HasPrefix(u, "nodes") || strings.HasPrefix(u, "NodePools") || strings.HasPrefix(u, "what serves") {
			t.Errorf("administrator: unseen %q", u)
		}
	}
}
