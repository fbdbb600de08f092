//go:build e2e

package selfcert

// Runs the self-managed certificate mode against a real kube-apiserver (KUBECONFIG).
//
//	go test -tags e2e ./webhook/selfcert -run E2E -v
//
// Optional environment (deploy/test/selfcert-e2e.sh sets them after applying the chart's
// RBAC, so the rotator runs with exactly the chart's permissions):
//
//	SELFCERT_E2E_NAMESPACE  existing namespace to use (default: a new one, deleted after)
//	SELFCERT_E2E_SECRET     Secret name            (default selfcert-e2e-certs)
//	SELFCERT_E2E_SERVICE    Service name           (default selfcert-e2e)
//	SELFCERT_E2E_WEBHOOK    configuration name     (default selfcert-e2e-<random>)
//	SELFCERT_E2E_AS         user to impersonate, e.g. system:serviceaccount:ns:sa

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

const e2eWait = 2 * time.Minute

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func TestE2ESelfManagedCertificates(t *testing.T) {
	kubeconfig := os.Getenv("KUBECONFIG")
	if kubeconfig == "" {
		t.Skip("KUBECONFIG not set")
	}
	admin, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("loading kubeconfig: %v", err)
	}
	cs := kubernetes.NewForConfigOrDie(admin)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	suffix := randomSuffix()
	ns := os.Getenv("SELFCERT_E2E_NAMESPACE")
	if ns == "" {
		ns = "selfcert-e2e-" + suffix
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating namespace: %v", err)
		}
		t.Cleanup(func() {
			_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		})
	}
	cfg := Config{
		Namespace:   ns,
		SecretName:  envOr("SELFCERT_E2E_SECRET", "selfcert-e2e-certs"),
		ServiceName: envOr("SELFCERT_E2E_SERVICE", "selfcert-e2e"),
		CertDir:     t.TempDir(),
		// Short lifetimes force rotations within seconds: a serving cert of 8s is renewed
		// once less than 5s of it are left, checked every second.
		CertValidity:  8 * time.Second,
		Lookahead:     5 * time.Second,
		CheckInterval: time.Second,
	}
	whName := envOr("SELFCERT_E2E_WEBHOOK", "selfcert-e2e-"+suffix)
	cfg.MutatingWebhookName, cfg.ValidatingWebhookName = whName, whName
	cfg.defaults() // Start applies them to its copy; the checks below need the file names

	// Start from a clean state: the rotator must create the Secret itself.
	_ = cs.CoreV1().Secrets(ns).Delete(ctx, cfg.SecretName, metav1.DeleteOptions{})
	createWebhookConfigs(ctx, t, cs, ns, cfg.ServiceName, whName)

	restCfg := rest.CopyConfig(admin)
	if as := os.Getenv("SELFCERT_E2E_AS"); as != "" {
		restCfg.Impersonate = rest.ImpersonationConfig{UserName: as}
		t.Logf("running the rotator as %s", as)
	}
	log := logrus.New()
	log.SetLevel(logrus.InfoLevel)
	ready, err := Start(ctx, cfg, restCfg, log.WithField("test", t.Name()))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	select {
	case <-ready:
	case <-time.After(e2eWait):
		t.Fatal("not ready: certificate files or CA injection missing")
	}

	// 1. Secret created and filled; the serving cert chains to its CA for the Service name.
	// Rotations run every few seconds here, so each check compares with the current state.
	s1 := waitSecret(ctx, t, cs, cfg, nil)
	ca1 := s1.Data["ca.crt"]
	verifyServing(t, ca1, s1.Data["tls.crt"], cfg.dnsNames()[0])

	// 2. caBundle injected into both configurations.
	waitCABundle(ctx, t, cs, whName, ca1)

	// 3. The files on disk follow the Secret.
	cur := waitFilesMatchSecret(ctx, t, cs, cfg)

	// A server that reloads the files the way `serve` does (controller-runtime's
	// certwatcher) and a client that trusts only the injected caBundle, as the API server.
	addr := serveFiles(ctx, t, cfg)
	served1 := waitServed(ctx, t, addr, ca1, cfg.dnsNames()[0], nil)

	// 4. Rotation without restart: the serving cert changes in the Secret and on disk,
	// signed by the same CA, which the webhook configurations still carry.
	s2 := waitSecret(ctx, t, cs, cfg, func(s *corev1.Secret) bool {
		return !bytes.Equal(s.Data["tls.crt"], cur.Data["tls.crt"])
	})
	if !bytes.Equal(s2.Data["ca.crt"], ca1) {
		t.Fatal("serving-cert rotation replaced the CA")
	}
	verifyServing(t, ca1, s2.Data["tls.crt"], cfg.dnsNames()[0])
	if !notAfter(t, s2.Data["tls.crt"]).After(notAfter(t, cur.Data["tls.crt"])) {
		t.Fatal("rotated certificate does not live longer than the old one")
	}
	rotated := waitFilesMatchSecret(ctx, t, cs, cfg)
	if bytes.Equal(rotated.Data["tls.crt"], cur.Data["tls.crt"]) {
		t.Fatal("files still hold the first certificate")
	}
	waitCABundle(ctx, t, cs, whName, ca1)
	// The same running server now presents a rotated certificate, still trusted.
	waitServed(ctx, t, addr, ca1, cfg.dnsNames()[0], func(c *x509.Certificate) bool {
		return !c.Equal(served1)
	})

	// 5. A deleted Secret comes back with a new CA, and the caBundle follows it.
	if err := cs.CoreV1().Secrets(ns).Delete(ctx, cfg.SecretName, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting secret: %v", err)
	}
	s3 := waitSecret(ctx, t, cs, cfg, func(s *corev1.Secret) bool {
		return s.UID != s1.UID && !bytes.Equal(s.Data["ca.crt"], ca1)
	})
	waitCABundle(ctx, t, cs, whName, s3.Data["ca.crt"])
	last := waitFilesMatchSecret(ctx, t, cs, cfg)
	verifyServing(t, s3.Data["ca.crt"], last.Data["tls.crt"], cfg.dnsNames()[0])
}

// serveFiles runs a TLS server on 127.0.0.1 whose certificate comes from CertDir
// through certwatcher, and returns its address.
func serveFiles(ctx context.Context, t *testing.T, cfg Config) string {
	t.Helper()
	certPath, keyPath := cfg.certFiles()
	cw, err := certwatcher.New(certPath, keyPath)
	if err != nil {
		t.Fatalf("certwatcher: %v", err)
	}
	cw.WithWatchInterval(time.Second)
	go func() { _ = cw.Start(ctx) }()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cw.GetCertificate})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// waitServed dials addr until the presented certificate verifies against caPEM for
// dnsName and cond (if any) holds, and returns it.
func waitServed(ctx context.Context, t *testing.T, addr string, caPEM []byte, dnsName string, cond func(*x509.Certificate) bool) *x509.Certificate {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	var got *x509.Certificate
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, e2eWait, true, func(context.Context) (bool, error) {
		conn, err := tls.Dial("tcp", addr, &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: dnsName})
		if err != nil {
			lastErr = err
			return false, nil
		}
		defer conn.Close()
		c := conn.ConnectionState().PeerCertificates[0]
		if cond != nil && !cond(c) {
			return false, nil
		}
		got = c
		return true, nil
	})
	if err != nil {
		t.Fatalf("server at %s never presented the expected certificate (last error: %v): %v", addr, lastErr, err)
	}
	return got
}

// createWebhookConfigs registers configurations that the API server never calls (their
// namespaceSelector matches no namespace), so the test cannot disturb the cluster.
func createWebhookConfigs(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, svc, name string) {
	t.Helper()
	never := &metav1.LabelSelector{MatchLabels: map[string]string{"selfcert-e2e-never": "true"}}
	ignore := admissionregistrationv1.Ignore
	none := admissionregistrationv1.SideEffectClassNone
	cc := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
			Namespace: ns, Name: svc, Path: ptr.To(path), Port: ptr.To[int32](443)}}
	}
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "m.selfcert-e2e.io", ClientConfig: cc("/mutate"), Rules: rules, FailurePolicy: &ignore,
			SideEffects: &none, AdmissionReviewVersions: []string{"v1"}, NamespaceSelector: never,
		}},
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "v.selfcert-e2e.io", ClientConfig: cc("/validate"), Rules: rules, FailurePolicy: &ignore,
			SideEffects: &none, AdmissionReviewVersions: []string{"v1"}, NamespaceSelector: never,
		}},
	}
	api := cs.AdmissionregistrationV1()
	_ = api.MutatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{})
	_ = api.ValidatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{})
	if _, err := api.MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating mutating configuration: %v", err)
	}
	if _, err := api.ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating validating configuration: %v", err)
	}
	t.Cleanup(func() {
		_ = api.MutatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = api.ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// waitSecret polls until the Secret holds a full key set and cond (if any) holds.
func waitSecret(ctx context.Context, t *testing.T, cs kubernetes.Interface, cfg Config, cond func(*corev1.Secret) bool) *corev1.Secret {
	t.Helper()
	var got *corev1.Secret
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, e2eWait, true, func(ctx context.Context) (bool, error) {
		s, err := cs.CoreV1().Secrets(cfg.Namespace).Get(ctx, cfg.SecretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		for _, k := range []string{"ca.crt", "ca.key", "tls.crt", "tls.key"} {
			if len(s.Data[k]) == 0 {
				return false, nil
			}
		}
		if cond != nil && !cond(s) {
			return false, nil
		}
		got = s
		return true, nil
	})
	if err != nil {
		t.Fatalf("waiting for secret %s/%s: %v", cfg.Namespace, cfg.SecretName, err)
	}
	return got
}

func waitCABundle(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, ca []byte) {
	t.Helper()
	api := cs.AdmissionregistrationV1()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, e2eWait, true, func(ctx context.Context) (bool, error) {
		m, err := api.MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		v, err := api.ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		mb, vb := m.Webhooks[0].ClientConfig.CABundle, v.Webhooks[0].ClientConfig.CABundle
		last = string(mb)
		return bytes.Equal(mb, ca) && bytes.Equal(vb, ca), nil
	})
	if err != nil {
		t.Fatalf("caBundle of %s never became the Secret's CA (last %.40q): %v", name, last, err)
	}
}

// waitFilesMatchSecret polls until the files in CertDir equal the Secret's current
// tls.crt, tls.key and ca.crt, and returns that Secret.
func waitFilesMatchSecret(ctx context.Context, t *testing.T, cs kubernetes.Interface, cfg Config) *corev1.Secret {
	t.Helper()
	certPath, keyPath := cfg.certFiles()
	var got *corev1.Secret
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, e2eWait, true, func(ctx context.Context) (bool, error) {
		s, err := cs.CoreV1().Secrets(cfg.Namespace).Get(ctx, cfg.SecretName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		c, _ := os.ReadFile(certPath)
		k, _ := os.ReadFile(keyPath)
		ca, _ := os.ReadFile(filepath.Join(cfg.CertDir, caCertName)) // for the ledger's peers
		if len(c) == 0 || !bytes.Equal(c, s.Data["tls.crt"]) || !bytes.Equal(k, s.Data["tls.key"]) || !bytes.Equal(ca, s.Data["ca.crt"]) {
			return false, nil
		}
		got = s
		return true, nil
	})
	if err != nil {
		t.Fatalf("certificate files in %s never matched the Secret: %v", cfg.CertDir, err)
	}
	return got
}

func parseCert(t *testing.T, pemBytes []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(pemBytes)
	if b == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatalf("parsing certificate: %v", err)
	}
	return c
}

func notAfter(t *testing.T, pemBytes []byte) time.Time { return parseCert(t, pemBytes).NotAfter }

// verifyServing checks what the API server checks when it calls the webhook.
func verifyServing(t *testing.T, caPEM, certPEM []byte, dnsName string) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA bundle holds no certificate")
	}
	if _, err := parseCert(t, certPEM).Verify(x509.VerifyOptions{
		DNSName: dnsName, Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		t.Fatalf("serving certificate does not verify for %s: %v", dnsName, err)
	}
}
