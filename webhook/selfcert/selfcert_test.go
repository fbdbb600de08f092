package selfcert

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type recordRT struct{ got *http.Request }

func (r *recordRT) RoundTrip(req *http.Request) (*http.Response, error) {
	r.got = req
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
}

func TestNameScopeAddsFieldSelector(t *testing.T) {
	names := map[string]string{
		"/api/v1/namespaces/ns/secrets":                                         "certs",
		"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations":   "hook",
		"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations": "hook",
	}
	cases := []struct {
		method, url, want string // want: expected fieldSelector, "" = untouched
	}{
		{"GET", "https://api/api/v1/namespaces/ns/secrets?watch=true&resourceVersion=5", "metadata.name=certs"},
		{"GET", "https://api/prefix/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", "metadata.name=hook"},
		{"GET", "https://api/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations?fieldSelector=a%3Db", "a=b,metadata.name=hook"},
		{"GET", "https://api/api/v1/namespaces/ns/secrets/certs", ""}, // a get by name
		{"GET", "https://api/api/v1/namespaces/other/secrets", ""},    // another namespace
		{"PUT", "https://api/api/v1/namespaces/ns/secrets", ""},       // not a read
		{"GET", "https://api/api/v1/namespaces/ns/configmaps", ""},    // another resource
	}
	for _, c := range cases {
		rec := &recordRT{}
		ns := &nameScope{next: rec, names: names}
		req, err := http.NewRequest(c.method, c.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		before := req.URL.String()
		if _, err := ns.RoundTrip(req); err != nil {
			t.Fatal(err)
		}
		if req.URL.String() != before {
			t.Errorf("%s %s: caller's request modified", c.method, c.url)
		}
		got := rec.got.URL.Query().Get("fieldSelector")
		orig, _ := url.Parse(c.url)
		if c.want == "" {
			if got != orig.Query().Get("fieldSelector") {
				t.Errorf("%s %s: fieldSelector %q, want untouched", c.method, c.url, got)
			}
			continue
		}
		if got != c.want {
			t.Errorf("%s %s: fieldSelector %q, want %q", c.method, c.url, got, c.want)
		}
		if orig.Query().Get("watch") == "true" && rec.got.URL.Query().Get("watch") != "true" {
			t.Errorf("%s %s: other query parameters lost", c.method, c.url)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Namespace: "ns", SecretName: "s", ServiceName: "svc", CertDir: "/tmp/x"}
	if err := ok.validate(); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
	missing := ok
	missing.SecretName = ""
	if err := missing.validate(); err == nil || !strings.Contains(err.Error(), "secret name") {
		t.Fatalf("missing secret name: got %v", err)
	}
	bad := ok
	bad.CertValidity, bad.Lookahead = time.Hour, 2*time.Hour
	if err := bad.validate(); err == nil {
		t.Fatal("lookahead longer than validity accepted")
	}
	ok.defaults()
	if ok.CertName != "tls.crt" || ok.KeyName != "tls.key" || ok.CAName != "svc-ca" {
		t.Fatalf("defaults: %+v", ok)
	}
	if got := ok.dnsNames(); got[0] != "svc.ns.svc" || got[1] != "svc.ns.svc.cluster.local" {
		t.Fatalf("dns names: %v", got)
	}
}

func TestWriteKeyPair(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{CertDir: dir}
	cfg.defaults()
	changed, err := writeKeyPair(cfg, []byte("cert1"), []byte("key1"))
	if err != nil || !changed {
		t.Fatalf("first write: changed=%v err=%v", changed, err)
	}
	changed, err = writeKeyPair(cfg, []byte("cert1"), []byte("key1"))
	if err != nil || changed {
		t.Fatalf("same content: changed=%v err=%v", changed, err)
	}
	if _, err := writeKeyPair(cfg, []byte("cert2"), []byte("key2")); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"tls.crt": "cert2", "tls.key": "key2"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != want {
			t.Fatalf("%s = %q (%v), want %q", name, b, err, want)
		}
		fi, _ := os.Stat(filepath.Join(dir, name))
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("temp files left behind: %v", entries)
	}
}
