package imagearch

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/testregistry"
)

// testRegistry is go-containerregistry's in-memory registry behind a handler that
// counts manifest reads and can hold them, or ask for basic auth.
type testRegistry struct {
	srv       *httptest.Server
	host      string
	manifests atomic.Int64
	mu        sync.Mutex
	hold      chan struct{} // non-nil: manifest reads wait for it to close
	user      string        // non-empty: basic auth user:pass required
	pass      string
}

func newTestRegistry(t *testing.T) *testRegistry {
	t.Helper()
	r := &testRegistry{}
	inner := registry.New()
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		hold, user, pass := r.hold, r.user, r.pass
		r.mu.Unlock()
		if user != "" {
			if u, p, ok := req.BasicAuth(); !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/manifests/") {
			r.manifests.Add(1)
			if hold != nil {
				<-hold
			}
		}
		inner.ServeHTTP(w, req)
	}))
	t.Cleanup(r.srv.Close)
	r.host = strings.TrimPrefix(r.srv.URL, "http://")
	return r
}

func (r *testRegistry) setHold(ch chan struct{}) { r.mu.Lock(); r.hold = ch; r.mu.Unlock() }
func (r *testRegistry) setAuth(user, pass string) {
	r.mu.Lock()
	r.user, r.pass = user, pass
	r.mu.Unlock()
}

// clock is a settable time source.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// waitUntil polls cond until it holds, failing the test after 30 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func lookup(t *testing.T, r *Resolver, images ...string) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.Architectures(ctx, Request{Namespace: "ns", Images: images})
}

func TestArchitecturesOfIndexAndSingleImage(t *testing.T) {
	reg := newTestRegistry(t)
	multi := reg.host + "/multi:1"
	testregistry.PushIndex(t, multi, testregistry.MultiArchIndex(t, "amd64", "arm64"))
	single := reg.host + "/single:1"
	testregistry.PushImage(t, single, testregistry.PlatformImage(t, "amd64"))
	r := New(Config{Insecure: []string{reg.host}})

	for _, tc := range []struct {
		images []string
		want   []string
	}{
		{[]string{multi}, []string{"amd64", "arm64"}},
		{[]string{single}, []string{"amd64"}},
		{[]string{multi, single}, []string{"amd64"}}, // every container's image must run
	} {
		got, err := lookup(t, r, tc.images...)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%v: got %v, %v; want %v", tc.images, got, err, tc.want)
		}
	}
}

func TestPodRequestCountsInitContainersOnce(t *testing.T) {
	spec := &corev1.PodSpec{
		ServiceAccountName: "sa",
		ImagePullSecrets:   []corev1.LocalObjectReference{{Name: "pull"}},
		InitContainers:     []corev1.Container{{Image: "init:1"}, {Image: "app:1"}},
		Containers:         []corev1.Container{{Image: "app:1"}, {Image: "sidecar:2"}},
	}
	req := PodRequest("ns", spec)
	if !slices.Equal(req.Images, []string{"init:1", "app:1", "sidecar:2"}) || req.ServiceAccount != "sa" || !slices.Equal(req.PullSecrets, []string{"pull"}) {
		t.Errorf("PodRequest = %+v", req)
	}
}

func TestCacheKeepsDigestsForEverTagsForTheirTTLAndFailuresBriefly(t *testing.T) {
	reg := newTestRegistry(t)
	tag := reg.host + "/app:1"
	digest := testregistry.PushImage(t, tag, testregistry.PlatformImage(t, "arm64"))
	c := &clock{now: time.Unix(1_000_000, 0)}
	r := New(Config{Insecure: []string{reg.host}, TagTTL: time.Minute, NegativeTTL: 10 * time.Second, Now: c.Now})

	reads := func() int64 { return reg.manifests.Load() }
	for range 3 {
		if got, err := lookup(t, r, tag, digest); err != nil || !slices.Equal(got, []string{"arm64"}) {
			t.Fatalf("got %v, %v", got, err)
		}
	}
	if n := reads(); n != 2 {
		t.Fatalf("%d manifest reads for a tag and a digest looked up three times, want 2", n)
	}
	c.Add(2 * time.Minute)
	if _, err := lookup(t, r, tag, digest); err != nil {
		t.Fatal(err)
	}
	if n := reads(); n != 3 {
		t.Fatalf("after the tag TTL: %d manifest reads, want 3 (the tag again, not the digest)", n)
	}

	missing := reg.host + "/missing:1"
	for range 2 {
		if _, err := lookup(t, r, missing); err == nil {
			t.Fatal("a missing image answered")
		}
	}
	if n := reads(); n != 4 {
		t.Fatalf("a failure looked up twice: %d manifest reads, want 4 (remembered)", n)
	}
	c.Add(11 * time.Second)
	if _, err := lookup(t, r, missing); err == nil {
		t.Fatal("a missing image answered")
	}
	if n := reads(); n != 5 {
		t.Fatalf("after the negative TTL: %d manifest reads, want 5 (tried again)", n)
	}
}

func TestCacheIsBounded(t *testing.T) {
	c := newCache(3, 1<<20)
	now := time.Now()
	for _, k := range []string{"a", "b", "c"} {
		c.put(entry{key: k, arches: []string{"amd64"}})
	}
	c.get("a", now) // a is now the most recently used
	c.put(entry{key: "d"})
	if _, ok := c.get("b", now); ok {
		t.Error("the least recently used entry was kept")
	}
	for _, k := range []string{"a", "c", "d"} {
		if _, ok := c.get(k, now); !ok {
			t.Errorf("%s was evicted", k)
		}
	}
	if c.len() != 3 {
		t.Errorf("len %d, want 3", c.len())
	}
}

func TestConcurrentAdmissionsMakeOneLookup(t *testing.T) {
	reg := newTestRegistry(t)
	img := reg.host + "/app:1"
	testregistry.PushImage(t, img, testregistry.PlatformImage(t, "amd64"))
	hold := make(chan struct{})
	reg.setHold(hold)
	r := New(Config{Insecure: []string{reg.host}})
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			got, err := lookup(t, r, img)
			if err == nil && !slices.Equal(got, []string{"amd64"}) {
				err = errors.New("wrong answer " + strings.Join(got, ","))
			}
			errs <- err
		})
	}
	// Every caller waits on the one held read; let it go once it has started.
	waitUntil(t, "a manifest read", func() bool { return reg.manifests.Load() > 0 })
	close(hold)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := reg.manifests.Load(); n != 1 {
		t.Errorf("%d manifest reads for 20 concurrent lookups, want 1", n)
	}
}

func TestCallerStopsWaitingAndTheLookupFillsTheCache(t *testing.T) {
	reg := newTestRegistry(t)
	img := reg.host + "/slow:1"
	testregistry.PushImage(t, img, testregistry.PlatformImage(t, "arm64"))
	hold := make(chan struct{})
	reg.setHold(hold)
	r := New(Config{Insecure: []string{reg.host}})

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := r.Architectures(ctx, Request{Images: []string{img}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a held registry answered %v, want the caller's deadline", err)
	}
	close(hold)
	// The background lookup fills the cache: the next pod is answered without a read.
	waitUntil(t, "the background lookup's answer", func() bool { return r.CacheEntries() > 0 })
	if got, err := lookup(t, r, img); err != nil || !slices.Equal(got, []string{"arm64"}) {
		t.Fatalf("after the background lookup: %v, %v", got, err)
	}
	if n := reg.manifests.Load(); n != 1 {
		t.Errorf("%d manifest reads, want 1", n)
	}
}

func TestPlainHTTPOnlyToInsecureRegistries(t *testing.T) {
	reg := newTestRegistry(t)
	img := reg.host + "/app:1"
	testregistry.PushImage(t, img, testregistry.PlatformImage(t, "amd64"))
	// Listed as internal (HTTPS allowed on loopback), not as insecure.
	_, err := lookup(t, New(Config{Internal: []string{reg.host}}), img)
	if err == nil || !strings.Contains(err.Error(), "IMAGE_INSECURE_REGISTRIES") {
		t.Fatalf("a loopback registry not listed as insecure: %v, want plain HTTP refused", err)
	}
	if n := reg.manifests.Load(); n != 0 {
		t.Errorf("%d manifest reads over refused HTTP", n)
	}
}

func TestPullSecretsOfThePodAndItsServiceAccount(t *testing.T) {
	reg := newTestRegistry(t)
	img := reg.host + "/private:1"
	testregistry.PushImage(t, img, testregistry.PlatformImage(t, "arm64"))
	reg.setAuth("puller", "s3cret")
	secret := func(name, host string) *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
			Type:       corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(
				`{"auths":{"` + host + `":{"username":"puller","password":"s3cret"}}}`)},
		}
	}
	kube := fake.NewClientset(
		secret("pod-secret", reg.host),
		secret("sa-secret", "http://"+reg.host+"/v2/"),
		secret("other-registry", "registry.example.com"),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "builder", Namespace: "ns"}, ImagePullSecrets: []corev1.LocalObjectReference{{Name: "sa-secret"}}},
	)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		req  Request
		ok   bool
	}{
		{"no secret", Request{Namespace: "ns"}, false},
		{"a secret for another registry", Request{Namespace: "ns", PullSecrets: []string{"other-registry", "missing"}}, false},
		{"the pod's secret", Request{Namespace: "ns", PullSecrets: []string{"pod-secret"}}, true},
		{"the ServiceAccount's secret", Request{Namespace: "ns", ServiceAccount: "builder"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := New(Config{PullSecrets: true, Kube: kube, Insecure: []string{reg.host}})
			tc.req.Images = []string{img}
			got, err := r.Architectures(ctx, tc.req)
			if tc.ok != (err == nil) || (tc.ok && !slices.Equal(got, []string{"arm64"})) {
				t.Errorf("got %v, %v; want ok=%v", got, err, tc.ok)
			}
		})
	}
}

func TestFailuresAreRememberedPerCredentials(t *testing.T) {
	reg := newTestRegistry(t)
	img := reg.host + "/private:1"
	testregistry.PushImage(t, img, testregistry.PlatformImage(t, "amd64"))
	reg.setAuth("u", "p")
	kube := fake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "pull", Namespace: "b"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"` + reg.host + `":{"auth":"dTpw"}}}`)},
	})
	r := New(Config{PullSecrets: true, Kube: kube, Insecure: []string{reg.host}})
	ctx := context.Background()
	if _, err := r.Architectures(ctx, Request{Namespace: "a", Images: []string{img}}); err == nil {
		t.Fatal("read without credentials")
	}
	got, err := r.Architectures(ctx, Request{Namespace: "b", PullSecrets: []string{"pull"}, Images: []string{img}})
	if err != nil || !slices.Equal(got, []string{"amd64"}) {
		t.Fatalf("with the pull secret, after another namespace's failure: %v, %v", got, err)
	}
}

func TestECRRegion(t *testing.T) {
	for host, want := range map[string]string{
		"123456789012.dkr.ecr.eu-west-1.amazonaws.com":      "eu-west-1",
		"123456789012.dkr.ecr-fips.us-east-1.amazonaws.com": "us-east-1",
		"123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn":  "cn-north-1",
		"123456789012.dkr.ecr.eu-west-1.amazonaws.com:443":  "eu-west-1",
		"public.ecr.aws":                                "",
		"12345.dkr.ecr.eu-west-1.amazonaws.com":         "",
		"123456789012.dkr.ecr.eu-west-1.example.com":    "",
		"evil.com/123456789012.dkr.ecr.x.amazonaws.com": "",
	} {
		got, ok := ecrRegion(host)
		if got != want || ok != (want != "") {
			t.Errorf("ecrRegion(%q) = %q, %v; want %q", host, got, ok, want)
		}
	}
}
