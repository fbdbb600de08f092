//go:build e2e

// Package e2e runs the webhook against a real API server, controller manager,
// scheduler, kwok kubelets and Karpenter (kwok provider) started by
// scripts/localcluster/up.sh. The webhook runs as a subprocess of the tests, so a
// test can kill and restart it; it is registered with
// scripts/localcluster/register-webhook.sh, the shape of the Helm chart's webhooks.
//
// Run with `make test-e2e` (brings a cluster up and down), or against a running
// cluster: LOCALCLUSTER_DIR=<state dir> go test -tags e2e ./e2e/
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/harness"
)

// blocklistedNamespace is in the webhook's BLOCKLISTED_NAMESPACE_LIST during the tests.
const blocklistedNamespace = "e2e-blocklisted"

// webhookNamespace is the webhook's own namespace (POD_NAMESPACE), never mutated.
const webhookNamespace = "custom-kube-scheduler-webhook"

// admissionTokenSecret holds the admission token (ADMISSION_TOKEN_SECRET), named as the
// chart and scripts/localcluster/lib.sh name it.
const admissionTokenSecret = "custom-kube-scheduler-webhook-admission-token"

// cluster is what every test needs: a client, and the webhook subprocess.
type cluster struct {
	dir    string // local cluster state dir (kubeconfig, pki, logs)
	repo   string // repository root
	bin    string // the webhook binary
	hc     *harness.Cluster
	client kubernetes.Interface
	// webhook is the suite's own webhook process, named webhook-e2e.
	webhook *harness.Serve
	// webhookEnv is the settings of every webhook process of the suite (newWebhook).
	webhookEnv []string
	// webhookKubeconfig is the webhook processes' kubeconfig (the chart's identity).
	webhookKubeconfig string
}

// The e2e environment, set up once by TestMain. Tests run one after another.
var env *cluster

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	c, cleanup, err := setup(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e setup: %v\n", err)
		return 1
	}
	env = c
	code := m.Run()
	cleanup()
	return code
}

func setup(ctx context.Context) (*cluster, func(), error) {
	repo, err := filepath.Abs("..")
	if err != nil {
		return nil, nil, fmt.Errorf("locating repository root: %w", err)
	}
	dir := os.Getenv("LOCALCLUSTER_DIR")
	if dir == "" {
		dir = filepath.Join(repo, ".localcluster", "e2e")
	}
	hc, err := harness.OpenCluster(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the local cluster (run `make test-e2e`, or scripts/localcluster/up.sh with LOCALCLUSTER_DIR set): %w", err)
	}
	port := hc.WebhookPort()
	if p := os.Getenv("WEBHOOK_PORT"); p != "" {
		if port, err = strconv.Atoi(p); err != nil {
			return nil, nil, fmt.Errorf("WEBHOOK_PORT: %w", err)
		}
	}

	// The suite's own client keeps a client-side rate limit (the harness's has none).
	cfg := rest.CopyConfig(hc.Config)
	cfg.QPS, cfg.Burst = 50, 100
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("building client: %w", err)
	}

	tmp, err := os.MkdirTemp("", "e2e-webhook-")
	if err != nil {
		return nil, nil, fmt.Errorf("creating temp dir: %w", err)
	}
	bin := os.Getenv("E2E_WEBHOOK_BIN")
	if bin == "" {
		bin = filepath.Join(tmp, "custom-kube-scheduler-webhook")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/custom-kube-scheduler-webhook")
		build.Dir, build.Stdout, build.Stderr = repo, os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			_ = os.RemoveAll(tmp)
			return nil, nil, fmt.Errorf("building the webhook: %w", err)
		}
	}

	// The webhook runs as deployed: as the chart's ServiceAccount with the chart's RBAC
	// (scripts/localcluster/webhook-rbac.sh, run by up.sh); cluster-admin is the driver's.
	webhookKubeconfig := os.Getenv("E2E_WEBHOOK_KUBECONFIG")
	if webhookKubeconfig == "" {
		webhookKubeconfig = filepath.Join(dir, "webhook-kubeconfig")
		rbac := exec.CommandContext(ctx, "bash", filepath.Join(repo, "scripts", "localcluster", "webhook-rbac.sh"))
		rbac.Env = append(os.Environ(), "LOCALCLUSTER_DIR="+dir)
		rbac.Stdout, rbac.Stderr = os.Stderr, os.Stderr
		if err := rbac.Run(); err != nil {
			_ = os.RemoveAll(tmp)
			return nil, nil, fmt.Errorf("giving the webhook the chart's RBAC: %w", err)
		}
	}

	c := &cluster{dir: dir, repo: repo, bin: bin, hc: hc, client: client, webhookKubeconfig: webhookKubeconfig}
	c.webhookEnv = []string{
		"LOG_LEVEL=debug",
		"BLOCKLISTED_NAMESPACE_LIST=kube-system,kube-public," + blocklistedNamespace,
		// Overrides the harness's admin kubeconfig.
		"KUBECONFIG=" + webhookKubeconfig,
		"POD_NAMESPACE=" + webhookNamespace,
		// Short, so stopping a replica does not slow the suite down; the rollout
		// test sets its own.
		"SHUTDOWN_DRAIN=500ms",
		// The convergence loop runs in the processes the converge tests start, with
		// short settings; this one only places pods (it still reads the
		// unavailability records, so fallback seats are placed by it).
		"CONVERGE=off",
		// Reviews are answered only at the path carrying the token kept in this
		// Secret, as the chart runs it; register-webhook.sh registers that path.
		"ADMISSION_TOKEN_SECRET=" + admissionTokenSecret,
		// The suite's pods run registry.k8s.io/pause, and some tests' NodePools leave
		// the architecture open: no image lookup may leave loopback. The architecture
		// tests run a process of their own with lookups on (arch_test.go).
		"IMAGE_ARCHITECTURES=off",
	}
	c.webhook = c.newWebhook("webhook-e2e", port)
	cleanup := func() {
		// Unregister first: a configuration left behind points at a stopped process
		// (and would clash with a later install of the chart under the same name).
		unregister(client)
		if err := c.webhook.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping webhook: %v\n", err)
		}
		_ = os.RemoveAll(tmp)
	}
	// The seat ledger keeps its records in the webhook's own namespace.
	_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: webhookNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		cleanup()
		return nil, nil, fmt.Errorf("creating namespace %s: %w", webhookNamespace, err)
	}
	// The token's Secret, created empty as the chart creates it: the webhook may only
	// get and update it.
	_, err = client.CoreV1().Secrets(webhookNamespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: admissionTokenSecret}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		cleanup()
		return nil, nil, fmt.Errorf("creating the admission token Secret: %w", err)
	}
	if err := c.webhook.Start(ctx); err != nil {
		cleanup()
		return nil, nil, err
	}
	if err := c.register(ctx, "full"); err != nil {
		cleanup()
		return nil, nil, err
	}
	return c, cleanup, nil
}

// webhookConfigName is the name register-webhook.sh gives both configurations, as the
// Helm chart does.
const webhookConfigName = "custom-kube-scheduler-webhook"

// unregister deletes the webhook configurations register-webhook.sh applied.
func unregister(client kubernetes.Interface) {
	ctx := context.Background()
	reg := client.AdmissionregistrationV1()
	if err := reg.MutatingWebhookConfigurations().Delete(ctx, webhookConfigName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		fmt.Fprintf(os.Stderr, "unregistering the mutating webhook: %v\n", err)
	}
	if err := reg.ValidatingWebhookConfigurations().Delete(ctx, webhookConfigName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		fmt.Fprintf(os.Stderr, "unregistering the validating webhook: %v\n", err)
	}
}

// register (re)applies the webhook configurations with the given filter set
// ("full": as the Helm chart installs them; "minimal": every pod reaches the
// webhook) and returns once a canary pod shows the API server calls the webhook.
func (c *cluster) register(ctx context.Context, filters string) error {
	return c.registerAt(ctx, filters, c.webhook.Port)
}

// registerAt registers the webhook at https://127.0.0.1:port instead of the
// webhook process's own port (e.g. a load balancer in front of several replicas).
func (c *cluster) registerAt(ctx context.Context, filters string, port int) error {
	return c.registerWith(ctx, filters, port)
}

// registerWith is registerAt with more settings of register-webhook.sh, e.g.
// WEBHOOK_SCOPE=opt-in.
func (c *cluster) registerWith(ctx context.Context, filters string, port int, env ...string) error {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(c.repo, "scripts", "localcluster", "register-webhook.sh"))
	cmd.Env = append(append(os.Environ(),
		"LOCALCLUSTER_DIR="+c.dir,
		fmt.Sprintf("WEBHOOK_PORT=%d", port),
		"WEBHOOK_FILTERS="+filters,
		"BLOCKLISTED_NAMESPACE_LIST=kube-system,kube-public,"+blocklistedNamespace,
	), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("registering the webhook (filters %s): %w", filters, err)
	}
	return nil
}

// newWebhook describes a webhook process of the suite's binary and settings,
// listening on port and logging to logs/<name>.log (name starts with webhook-e2e, so
// down.sh stops it too); env adds or overrides settings.
func (c *cluster) newWebhook(name string, port int, env ...string) *harness.Serve {
	return c.hc.NewServe(c.bin, name, port, append(slices.Clone(c.webhookEnv), env...)...)
}
