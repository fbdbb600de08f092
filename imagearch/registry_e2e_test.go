//go:build e2e

package imagearch

// Against real registries: Debian's docker-registry (as scripts/image/lib.sh runs it),
// plain, behind htpasswd, and with TLS under an ECR host name whose token the real AWS
// SDK gets from scripts/image/ecrlocal, the local ECR API stand-in. Everything listens
// on loopback and is stopped by the test. Run by scripts/localcluster/run-e2e.sh, or:
//
//	go test -tags e2e -run 'TestE2E|BenchmarkE2E' -bench BenchmarkE2E ./imagearch/

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/testcert"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/testregistry"
)

// ecrRegistry is the ECR host name the TLS registry serves as.
const ecrRegistry = "123456789012.dkr.ecr.eu-west-1.amazonaws.com"

// ecrCertificate writes a CA and a serving certificate for the ECR host name and
// 127.0.0.1; it returns the files and a pool trusting the CA.
func ecrCertificate(t testing.TB) (caFile, certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, caKey := testcert.Create(t, caTmpl, nil, nil)
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	der, key := testcert.Create(t, &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: ecrRegistry},
		DNSNames: []string{ecrRegistry}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, caKey)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	caFile, certFile, keyFile = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for file, data := range map[string][]byte{
		caFile:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyFile:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	} {
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool = x509.NewCertPool()
	pool.AddCert(ca)
	return caFile, certFile, keyFile, pool
}

// ecrLocal builds and starts scripts/image/ecrlocal for account 123456789012 in
// eu-west-1, handing out the registry password; it returns its endpoint URL.
func ecrLocal(t testing.TB, registryURL, caFile, password, keyID, secret string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "ecrlocal")
	build := exec.Command("go", "build", "-o", bin, "../scripts/image/ecrlocal")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build ecrlocal: %v\n%s", err, out)
	}
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	addr := filepath.Join(dir, "addr")
	cmd := exec.Command(bin, "-listen", "127.0.0.1:0", "-addr-file", addr, "-region", "eu-west-1", "-account", "123456789012",
		"-access-key-id", keyID, "-secret-access-key-file", write("secret", secret), "-registry", registryURL,
		"-registry-ca", caFile, "-password-file", write("password", password), "-calls", filepath.Join(dir, "calls.jsonl"))
	testregistry.StartProcess(t, cmd, filepath.Join(dir, "ecrlocal.log"))
	deadline := time.Now().Add(60 * time.Second)
	for {
		if b, err := os.ReadFile(addr); err == nil && len(b) > 0 {
			return "http://" + strings.TrimSpace(string(b))
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "ecrlocal.log"))
			t.Fatalf("ecrlocal did not start:\n%s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// plainRegistry is a docker-registry holding a multi-arch index (amd64, arm64) and a
// single-arch amd64 image, built offline with random layers.
func plainRegistry(t testing.TB) (multi, single string) {
	t.Helper()
	host := testregistry.Start(t, testregistry.Options{}).Host
	multi, single = host+"/multi:1", host+"/amd64-only:1"
	testregistry.PushIndex(t, multi, testregistry.MultiArchIndex(t, "amd64", "arm64"))
	testregistry.PushImage(t, single, testregistry.PlatformImage(t, "amd64"))
	return multi, single
}

func TestE2EDockerRegistryIndexAndSingleImage(t *testing.T) {
	multi, single := plainRegistry(t)
	host := strings.Split(multi, "/")[0]
	r := New(Config{Insecure: []string{host}})
	ctx := context.Background()
	for _, tc := range []struct {
		images []string
		want   []string
	}{{[]string{multi}, []string{"amd64", "arm64"}}, {[]string{single}, []string{"amd64"}}, {[]string{multi, single}, []string{"amd64"}}} {
		got, err := r.Architectures(ctx, Request{Images: tc.images})
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%v: %v, %v; want %v", tc.images, got, err, tc.want)
		}
	}
}

func TestE2EHtpasswdRegistryWithImagePullSecrets(t *testing.T) {
	host := testregistry.Start(t, testregistry.Options{Htpasswd: testregistry.Htpasswd(t, "puller", "pull-pass")}).Host
	img := host + "/private:1"
	testregistry.PushImage(t, img, testregistry.PlatformImage(t, "arm64"), remote.WithAuth(&authn.Basic{Username: "puller", Password: "pull-pass"}))
	kube := fake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "pull", Namespace: "team"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"` + host + `":{"username":"puller","password":"pull-pass"}}}`)},
	}, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team"}, ImagePullSecrets: []corev1.LocalObjectReference{{Name: "pull"}}})
	ctx := context.Background()
	r := New(Config{PullSecrets: true, Kube: kube, Insecure: []string{host}})
	if _, err := r.Architectures(ctx, Request{Namespace: "team", Images: []string{img}}); err == nil || !strings.Contains(err.Error(), "UNAUTHORIZED") {
		t.Errorf("without a pull secret: %v, want the registry's refusal", err)
	}
	for _, req := range []Request{
		{Namespace: "team", PullSecrets: []string{"pull"}, Images: []string{img}},
		{Namespace: "team", ServiceAccount: "app", Images: []string{img}},
	} {
		if got, err := r.Architectures(ctx, req); err != nil || !slices.Equal(got, []string{"arm64"}) {
			t.Errorf("%+v: %v, %v", req, got, err)
		}
	}
}

// ecrSetup is a TLS registry under the ECR host name (dialled on loopback) behind
// htpasswd user AWS, and ecrlocal handing out its password as the ECR token.
func ecrSetup(t testing.TB) (endpoint string, transport *http.Transport, image string) {
	t.Helper()
	const password, keyID, secret = "ecr-token-password", "AKIDTEST", "test-secret-key"
	caFile, certFile, keyFile, pool := ecrCertificate(t)
	host := testregistry.Start(t, testregistry.Options{Htpasswd: testregistry.Htpasswd(t, "AWS", password), Cert: certFile, Key: keyFile}).Host
	transport = &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == ecrRegistry+":443" {
				addr = host
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}
	image = ecrRegistry + "/team/app:1"
	testregistry.PushImage(t, host+"/team/app:1", testregistry.PlatformImage(t, "arm64"), remote.WithAuth(&authn.Basic{Username: "AWS", Password: password}), remote.WithTransport(transport))
	// The SDK's default chain reads these; nothing else (no file, no instance metadata).
	t.Setenv("AWS_ACCESS_KEY_ID", keyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	return ecrLocal(t, "https://"+host, caFile, password, keyID, secret), transport, image
}

func TestE2EECRTokenFromTheLocalECREndpoint(t *testing.T) {
	endpoint, transport, image := ecrSetup(t)
	ctx := context.Background()
	// Without the endpoint's token the registry refuses: an ECR API on a loopback port
	// nothing listens on (the test never leaves loopback).
	closed := fmt.Sprintf("http://127.0.0.1:%d", testregistry.FreePort(t))
	if _, err := New(Config{Transport: transport, Internal: []string{ecrRegistry}, ECREndpoint: closed}).Architectures(ctx, Request{Images: []string{image}}); err == nil || !strings.Contains(err.Error(), "GetAuthorizationToken") {
		t.Fatalf("without an ECR API: %v, want GetAuthorizationToken's failure", err)
	}
	r := New(Config{Transport: transport, Internal: []string{ecrRegistry}, ECREndpoint: endpoint})
	got, err := r.Architectures(ctx, Request{Images: []string{image}})
	if err != nil || !slices.Equal(got, []string{"arm64"}) {
		t.Fatalf("through the ECR token: %v, %v", got, err)
	}
}

// BenchmarkE2ELookup measures one image's lookup against docker-registry on loopback:
// cold (a fresh resolver: the manifest and, for a single image, its config) and warm
// (from the cache).
func BenchmarkE2ELookup(b *testing.B) {
	multi, single := plainRegistry(b)
	host := strings.Split(multi, "/")[0]
	ctx := context.Background()
	for _, img := range []struct{ name, ref string }{{"index", multi}, {"single", single}} {
		b.Run("cold/"+img.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := New(Config{Insecure: []string{host}}).Architectures(ctx, Request{Images: []string{img.ref}}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("warm/"+img.name, func(b *testing.B) {
			r := New(Config{Insecure: []string{host}})
			if _, err := r.Architectures(ctx, Request{Images: []string{img.ref}}); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := r.Architectures(ctx, Request{Images: []string{img.ref}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
