package harness

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The proxy calls the upstream as the kubeconfig's identity, holds back Lease writes
// only, and its own kubeconfig works with client-go.
func TestSlowAPIDelaysLeaseWritesOnly(t *testing.T) {
	var (
		mu       sync.Mutex
		authSeen []string
	)
	upstream := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		authSeen = append(authSeen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/leases/l"):
			_, _ = w.Write([]byte(`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l","namespace":"ns"}}`))
		case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/leases/l"):
			_, _ = w.Write([]byte(`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l","namespace":"ns"}}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer upstream.Close()
	dir := t.TempDir()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["up"] = &clientcmdapi.Cluster{Server: upstream.URL, CertificateAuthorityData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: upstream.Certificate().Raw})}
	kc.AuthInfos["up"] = &clientcmdapi.AuthInfo{Token: "the-token"}
	kc.Contexts["up"] = &clientcmdapi.Context{Cluster: "up", AuthInfo: "up"}
	kc.CurrentContext = "up"
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	const delay = 300 * time.Millisecond
	slow, err := StartSlowAPI(path, dir, LeaseWritesBetween(delay, delay))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", slow.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	leases := client.CoordinationV1().Leases("ns")
	ctx := context.Background()
	lease, err := leases.Get(ctx, "l", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get through the proxy: %v", err)
	}
	start := time.Now()
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update through the proxy: %v", err)
	}
	if took := time.Since(start); took < delay {
		t.Errorf("a Lease write took %v, want at least the injected %v", took, delay)
	}
	if slow.Delayed() != 1 {
		t.Errorf("delayed %d requests, want 1 (the write, not the read)", slow.Delayed())
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range authSeen {
		if a != "Bearer the-token" {
			t.Errorf("the upstream saw Authorization %q, want the kubeconfig's token", a)
		}
	}
	if err := slow.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(slow.Kubeconfig); !os.IsNotExist(err) {
		t.Errorf("the proxy's kubeconfig is left behind: %v", err)
	}
}

func TestParseDelayRange(t *testing.T) {
	for in, want := range map[string][2]time.Duration{"1s-3s": {time.Second, 3 * time.Second}, "2s": {2 * time.Second, 2 * time.Second}} {
		lo, hi, err := ParseDelayRange(in)
		if err != nil || lo != want[0] || hi != want[1] {
			t.Errorf("%q: %v %v %v, want %v", in, lo, hi, err, want)
		}
	}
	for _, bad := range []string{"", "3s-1s", "x", "1s-y", "-1s"} {
		if _, _, err := ParseDelayRange(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
