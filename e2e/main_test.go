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
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// blocklistedNamespace is in the webhook's BLOCKLISTED_NAMESPACE_LIST during the tests.
const blocklistedNamespace = "e2e-blocklisted"

// webhookNamespace is the webhook's own namespace (POD_NAMESPACE), never mutated.
const webhookNamespace = "custom-kube-scheduler-webhook"

// cluster is what every test needs: a client, and the webhook subprocess.
type cluster struct {
	dir     string // local cluster state dir (kubeconfig, pki, logs)
	repo    string // repository root
	client  kubernetes.Interface
	webhook *webhookProcess
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
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if _, err := os.Stat(kubeconfig); err != nil {
		return nil, nil, fmt.Errorf("no local cluster in %s (run `make test-e2e`, or scripts/localcluster/up.sh with LOCALCLUSTER_DIR set): %w", dir, err)
	}
	offset := 0
	if b, err := os.ReadFile(filepath.Join(dir, "port-offset")); err == nil {
		if offset, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			return nil, nil, fmt.Errorf("reading port offset of %s: %w", dir, err)
		}
	}
	port := 9443 + offset
	if p := os.Getenv("WEBHOOK_PORT"); p != "" {
		if port, err = strconv.Atoi(p); err != nil {
			return nil, nil, fmt.Errorf("WEBHOOK_PORT: %w", err)
		}
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
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

	pki := filepath.Join(dir, "pki")
	wh := &webhookProcess{
		bin:  bin,
		log:  filepath.Join(dir, "logs", "webhook-e2e.log"),
		port: port,
		ca:   filepath.Join(pki, "ca.crt"),
		env: []string{
			"LOG_LEVEL=debug",
			"BLOCKLISTED_NAMESPACE_LIST=kube-system,kube-public," + blocklistedNamespace,
			fmt.Sprintf("LISTEN_ADDRESS=127.0.0.1:%d", port),
			"TLS_CERT_FILE=" + filepath.Join(pki, "webhook.crt"),
			"TLS_KEY_FILE=" + filepath.Join(pki, "webhook.key"),
			"KUBECONFIG=" + webhookKubeconfig,
			"POD_NAMESPACE=" + webhookNamespace,
			// Short, so stopping a replica does not slow the suite down; the rollout
			// test sets its own.
			"SHUTDOWN_DRAIN=500ms",
			// The convergence loop runs in the processes the converge tests start, with
			// short settings; this one only places pods (it still reads the
			// unavailability records, so fallback seats are placed by it).
			"CONVERGE=off",
		},
	}
	c := &cluster{dir: dir, repo: repo, client: client, webhook: wh}
	cleanup := func() {
		// Unregister first: a configuration left behind points at a stopped process
		// (and would clash with a later install of the chart under the same name).
		unregister(client)
		if err := wh.stop(); err != nil {
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
	if err := wh.start(ctx); err != nil {
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
	return c.registerAt(ctx, filters, c.webhook.port)
}

// registerAt registers the webhook at https://127.0.0.1:port instead of the
// webhook process's own port (e.g. a load balancer in front of several replicas).
func (c *cluster) registerAt(ctx context.Context, filters string, port int) error {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(c.repo, "scripts", "localcluster", "register-webhook.sh"))
	cmd.Env = append(os.Environ(),
		"LOCALCLUSTER_DIR="+c.dir,
		fmt.Sprintf("WEBHOOK_PORT=%d", port),
		"WEBHOOK_FILTERS="+filters,
		"BLOCKLISTED_NAMESPACE_LIST=kube-system,kube-public,"+blocklistedNamespace,
	)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("registering the webhook (filters %s): %w", filters, err)
	}
	return nil
}

// webhookProcess is the webhook binary running `serve` as a subprocess.
type webhookProcess struct {
	bin, log, ca string
	port         int
	env          []string
	cmd          *exec.Cmd
	done         chan error
}

// replica returns another webhook process of the same binary and settings that
// listens on port and logs to logPath.
func (w *webhookProcess) replica(port int, logPath string) *webhookProcess {
	r := &webhookProcess{bin: w.bin, log: logPath, ca: w.ca, port: port}
	for _, kv := range w.env {
		if strings.HasPrefix(kv, "LISTEN_ADDRESS=") {
			kv = fmt.Sprintf("LISTEN_ADDRESS=127.0.0.1:%d", port)
		}
		r.env = append(r.env, kv)
	}
	return r
}

// start runs `serve` and waits until /readyz answers 200 (caches synced).
func (w *webhookProcess) start(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(w.log), 0o755); err != nil {
		return fmt.Errorf("creating log dir: %w", err)
	}
	logf, err := os.OpenFile(w.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening webhook log: %w", err)
	}
	defer logf.Close() // the child keeps its own descriptor
	// Not CommandContext: the process must outlive the context of one call.
	cmd := exec.Command(w.bin, "serve")
	cmd.Env = append(os.Environ(), w.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s serve: %w", w.bin, err)
	}
	w.cmd, w.done = cmd, make(chan error, 1)
	go func() { w.done <- cmd.Wait() }()
	// Recorded like the cluster's daemons, so down.sh stops it even if this test
	// binary dies first (e.g. on a go test -timeout).
	if err := w.recordPID(); err != nil {
		_ = w.kill()
		return err
	}
	if err := w.waitReady(ctx); err != nil {
		_ = w.stop()
		return err
	}
	return nil
}

// pidName is the name of the process's PID file in the cluster's pids/ dir.
func (w *webhookProcess) pidName() string {
	return strings.TrimSuffix(filepath.Base(w.log), ".log")
}

func (w *webhookProcess) recordPID() error {
	dir := filepath.Join(filepath.Dir(filepath.Dir(w.log)), "pids")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating pid dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, w.pidName()+".pid"), []byte(strconv.Itoa(w.cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return fmt.Errorf("recording webhook pid: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, w.pidName()+".cmd"), []byte(filepath.Base(w.bin)+"\n"), 0o644); err != nil {
		return fmt.Errorf("recording webhook command: %w", err)
	}
	return nil
}

func (w *webhookProcess) waitReady(ctx context.Context) error {
	pem, err := os.ReadFile(w.ca)
	if err != nil {
		return fmt.Errorf("reading CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return errors.New("no certificate in " + w.ca)
	}
	hc := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}
	defer hc.CloseIdleConnections()
	url := fmt.Sprintf("https://127.0.0.1:%d/readyz", w.port)
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for {
		select {
		case err := <-w.done:
			w.done <- err
			return fmt.Errorf("webhook exited before becoming ready (%v); see %s", err, w.log)
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("building readiness request: %w", err)
		}
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("webhook not ready at %s: %w; see %s", url, ctx.Err(), w.log)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// kill ends the process with SIGKILL, as a crash or an OOM kill would.
func (w *webhookProcess) kill() error {
	if w.cmd == nil {
		return nil
	}
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing webhook: %w", err)
	}
	<-w.done
	w.cmd = nil
	return nil
}

// stop ends the process with SIGTERM, then SIGKILL after 10 s.
func (w *webhookProcess) stop() error {
	if w.cmd == nil {
		return nil
	}
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stopping webhook: %w", err)
	}
	select {
	case <-w.done:
		w.cmd = nil
		return nil
	case <-time.After(10 * time.Second):
		return w.kill()
	}
}
