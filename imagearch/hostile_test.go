package imagearch

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/testregistry"
)

// secretMarker is what an internal endpoint answers: it must never come back in an
// error, a warning or the cache.
const secretMarker = "INTERNAL-ONLY-RESPONSE"

// hostileRegistry is a registry server (plain HTTP on loopback) that answers the
// manifests of a few repositories with harm:
//
//	huge404     a 404 whose body is 32 MiB
//	endless404  a 404 whose body never ends
//	endless     a 200 index whose body never ends (no Content-Length)
//	huge        a valid 48 MiB image index, with its Content-Length
//	hugechunked the same without a Content-Length
//	tarpit      never answers (until the test ends)
//	redirect    a redirect to target (set by the test)
//	loop        a redirect to itself, for ever
type hostileRegistry struct {
	srv    *httptest.Server
	host   string
	target string
	hits   atomic.Int64 // manifest requests
	held   atomic.Int64 // tarpit requests being held
	stop   chan struct{}
}

// chunk is written again and again: the server allocates nothing per byte sent.
var chunk = bytes.Repeat([]byte("x"), 64<<10)

func newHostileRegistry(t *testing.T) *hostileRegistry {
	t.Helper()
	h := &hostileRegistry{stop: make(chan struct{})}
	index := testregistry.HugeIndex(48 << 20)
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/v2/" {
			w.WriteHeader(http.StatusOK)
			return
		}
		repo, _, ok := strings.Cut(strings.TrimPrefix(req.URL.Path, "/v2/"), "/manifests/")
		if !ok {
			http.NotFound(w, req)
			return
		}
		h.hits.Add(1)
		switch repo {
		case "huge404":
			w.WriteHeader(http.StatusNotFound)
			for range (32 << 20) / len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case "endless404", "endless":
			if repo == "endless" {
				w.Header().Set("Content-Type", "application/vnd.oci.image.index.v1+json")
			} else {
				w.WriteHeader(http.StatusNotFound)
			}
			for {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case "huge", "hugechunked":
			w.Header().Set("Content-Type", "application/vnd.oci.image.index.v1+json")
			if repo == "huge" {
				w.Header().Set("Content-Length", fmt.Sprint(len(index)))
			}
			_, _ = w.Write(index)
		case "tarpit":
			h.held.Add(1)
			defer h.held.Add(-1)
			select {
			case <-h.stop:
			case <-req.Context().Done():
			}
		case "redirect":
			http.Redirect(w, req, h.target, http.StatusTemporaryRedirect)
		case "loop":
			http.Redirect(w, req, req.URL.String(), http.StatusTemporaryRedirect)
		default:
			http.NotFound(w, req)
		}
	}))
	// Held requests end before the server closes (Close waits for them).
	t.Cleanup(h.srv.Close)
	t.Cleanup(func() { close(h.stop) })
	h.host = strings.TrimPrefix(h.srv.URL, "http://")
	return h
}

// allocated runs f and returns the bytes the process allocated meanwhile.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// maxLookupAlloc bounds what one lookup of a hostile registry may allocate: a few
// times maxBodyBytes (before: 286 MiB for a 48 MiB index, 330 MiB for a 32 MiB 404).
const maxLookupAlloc = 32 << 20

// TestHostileRegistryAnswersCostBoundedMemory: each harmful answer is refused or cut
// short, one lookup allocates a bounded amount, and the error names the registry and
// the status, never the body.
func TestHostileRegistryAnswersCostBoundedMemory(t *testing.T) {
	h := newHostileRegistry(t)
	for _, tc := range []struct {
		repo string
		want string // in the error
	}{
		{"huge404", "answered HTTP 404"},
		{"endless404", "answered HTTP 404"},
		{"endless", "larger than 4 MiB"},
		{"huge", "larger than 4 MiB"},
		{"hugechunked", "larger than 4 MiB"},
	} {
		t.Run(tc.repo, func(t *testing.T) {
			r := New(Config{Insecure: []string{h.host}})
			var err error
			n := allocated(func() { _, err = lookup(t, r, h.host+"/"+tc.repo+":1") })
			t.Logf("%s: one lookup allocated %.1f MiB; error %q", tc.repo, float64(n)/(1<<20), err)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), h.host) {
				t.Fatalf("error %v, want it to name the registry and %q", err, tc.want)
			}
			if len(err.Error()) > 512 || strings.Contains(err.Error(), "xxxx") {
				t.Fatalf("the error carries the answer (%d bytes)", len(err.Error()))
			}
			if n > maxLookupAlloc {
				t.Fatalf("one lookup allocated %d MiB, want at most %d MiB", n>>20, maxLookupAlloc>>20)
			}
			// The failure is remembered small: the whole failure cache is tiny.
			if got := r.failures.size(); got > 2<<10 {
				t.Fatalf("the remembered failure takes %d bytes", got)
			}
		})
	}
}

// TestManyDistinctTagsKeepTheCachesBounded: failures of many distinct tags stay within
// the failure cache's bytes and never push another image's answer out.
func TestManyDistinctTagsKeepTheCachesBounded(t *testing.T) {
	h := newHostileRegistry(t)
	good := newTestRegistry(t)
	img := good.host + "/app:1"
	testregistry.PushImage(t, img, testregistry.PlatformImage(t, "arm64"))
	r := New(Config{Insecure: []string{h.host, good.host}, MaxEntries: 8})
	if _, err := lookup(t, r, img); err != nil {
		t.Fatal(err)
	}
	const tags = maxFailures + 64
	for i := range tags {
		if _, err := lookup(t, r, fmt.Sprintf("%s/missing:%d", h.host, i)); err == nil {
			t.Fatal("a 404 answered")
		}
	}
	if n, b := r.failures.len(), r.failures.size(); n > maxFailures || b > maxFailureBytes {
		t.Fatalf("failure cache: %d entries, %d bytes; want at most %d, %d", n, b, maxFailures, maxFailureBytes)
	}
	t.Logf("after %d failing tags: failure cache %d entries, %d KiB", tags, r.failures.len(), r.failures.size()>>10)
	reads := good.manifests.Load()
	if got, err := lookup(t, r, img); err != nil || !slices.Equal(got, []string{"arm64"}) || good.manifests.Load() != reads {
		t.Fatalf("the good image after %d failing tags: %v, %v, %d reads (want its cached answer)", tags, got, err, good.manifests.Load()-reads)
	}
}

// internalEndpoint is an HTTPS server on loopback that the webhook must never read for
// a tenant, and a transport that trusts it (as a cluster's internal CA would be).
func internalEndpoint(t *testing.T) (*httptest.Server, *atomic.Int64, *http.Transport) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"message":"`+secretMarker+`"}`)
	}))
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return srv, &hits, &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
}

// TestRedirectsToInternalEndpointsAreRefusedAndBounded: a registry cannot make the
// webhook read an internal HTTPS endpoint, nor echo what one says; redirects stay on
// HTTPS and are bounded.
func TestRedirectsToInternalEndpointsAreRefusedAndBounded(t *testing.T) {
	h := newHostileRegistry(t)
	internal, hits, tr := internalEndpoint(t)
	h.target = internal.URL + "/secret"

	r := New(Config{Insecure: []string{h.host}, Transport: tr})
	_, err := lookup(t, r, h.host+"/redirect:1")
	if err == nil || strings.Contains(err.Error(), secretMarker) || !strings.Contains(err.Error(), "IMAGE_INTERNAL_REGISTRIES") {
		t.Fatalf("a redirect to an internal endpoint: %v, want refused without its answer", err)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the internal endpoint was called %d times", n)
	}

	// Listed, it is reached, and its answer is still never echoed.
	listed := New(Config{Insecure: []string{h.host}, Internal: []string{strings.TrimPrefix(internal.URL, "https://")}, Transport: tr})
	if _, err := lookup(t, listed, h.host+"/redirect:2"); err == nil || strings.Contains(err.Error(), secretMarker) || !strings.Contains(err.Error(), "HTTP 404") {
		t.Fatalf("a listed internal endpoint's 404: %v, want the status without the body", err)
	}
	if hits.Load() == 0 {
		t.Fatal("a listed internal registry was not reached")
	}

	// Plain HTTP is never a redirect's target unless listed.
	h.target = "http://" + strings.TrimPrefix(internal.URL, "https://") + "/plain"
	before := hits.Load()
	if _, err := lookup(t, listed, h.host+"/redirect:3"); err == nil || !strings.Contains(err.Error(), "plain HTTP refused") {
		t.Fatalf("a redirect to plain HTTP: %v", err)
	}
	if hits.Load() != before {
		t.Fatal("a redirect to plain HTTP was followed")
	}

	// A redirect loop stops after maxRedirects.
	start := h.hits.Load()
	if _, err := lookup(t, r, h.host+"/loop:1"); err == nil || !strings.Contains(err.Error(), "redirects") {
		t.Fatalf("a redirect loop: %v", err)
	}
	if n := h.hits.Load() - start; n > maxRedirects+1 {
		t.Fatalf("a redirect loop was followed %d times, want at most %d", n, maxRedirects+1)
	}
}

// TestRegistriesOnInternalAddressesAreRefusedUnlessListed: loopback, link-local and the
// refused networks are reached only for listed registries.
func TestRegistriesOnInternalAddressesAreRefusedUnlessListed(t *testing.T) {
	internal, hits, tr := internalEndpoint(t)
	host := strings.TrimPrefix(internal.URL, "https://")
	if _, err := lookup(t, New(Config{Transport: tr}), host+"/app:1"); err == nil || !strings.Contains(err.Error(), "IMAGE_INTERNAL_REGISTRIES") {
		t.Fatalf("a loopback registry not listed: %v", err)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("an unlisted loopback registry was called %d times", n)
	}
	d := &destinations{refused: mustNetworks(t, "10.100.0.0/16", "fd00:10::/64")}
	for ip, want := range map[string]bool{
		"127.0.0.1": false, "::1": false, "169.254.169.254": false, "fe80::1": false, "0.0.0.0": false,
		"::ffff:127.0.0.1": false, "10.100.3.4": false, "fd00:10::5": false, "224.0.0.1": false,
		"10.0.0.1": true, "52.95.110.1": true, "2600:1f18::1": true,
	} {
		if got := d.permitted(mustAddr(t, ip)); got != want {
			t.Errorf("permitted(%s) = %v, want %v", ip, got, want)
		}
	}
}

// TestOneHangingRegistryLeavesOtherTenantsTheirAnswers: a registry that never answers
// holds at most its own slots; another namespace's image on a healthy registry is
// still read while it hangs, and a lookup refused for want of a slot is not
// remembered as the registry's failure.
func TestOneHangingRegistryLeavesOtherTenantsTheirAnswers(t *testing.T) {
	h := newHostileRegistry(t)
	good := newTestRegistry(t)
	img := good.host + "/app:1"
	testregistry.PushImage(t, img, testregistry.PlatformImage(t, "amd64"))
	// A long fetch time-out: the hanging lookups hold their slots for the whole test.
	r := New(Config{Insecure: []string{h.host, good.host}, FetchTimeout: 10 * time.Minute})

	// Tenant "evil" names many distinct tags of the tarpit, every admission giving up
	// after 100 ms as a budget does; the lookups go on in the background.
	for i := range 2 * maxConcurrentFetches {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, _ = r.Architectures(ctx, Request{Namespace: "evil", Images: []string{fmt.Sprintf("%s/tarpit:%d", h.host, i)}})
		cancel()
	}
	waitUntil(t, "the tarpit holding its registry's slots", func() bool { return h.held.Load() >= perRegistrySlots })

	// Another tenant's image on a healthy registry is read while the tarpit hangs (a
	// generous deadline: before, every slot was the tarpit's and this waited for ever).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := r.Architectures(ctx, Request{Namespace: "good", Images: []string{img}})
	if err != nil || !slices.Equal(got, []string{"amd64"}) {
		t.Fatalf("another tenant's image while a registry hangs: %v, %v", got, err)
	}
	if n := h.held.Load(); n > perRegistrySlots {
		t.Errorf("the tarpit holds %d lookups, want at most %d", n, perRegistrySlots)
	}

	// Past the registry's queue a lookup is refused at once, and not remembered. (Each
	// try names a tag of its own: one the queue still took joins it.)
	busy, tries := "", 0
	waitUntil(t, "the tarpit's queue full", func() bool {
		tries++
		img := fmt.Sprintf("%s/tarpit:busy-%d", h.host, tries)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := r.Architectures(ctx, Request{Namespace: "evil", Images: []string{img}})
		if errors.Is(err, errBusy) {
			busy = img
			return true
		}
		return false
	})
	if _, ok := r.failures.get(busy+"\x00"+(Request{Namespace: "evil"}).credentialsKey(), time.Now()); ok {
		t.Fatal("a lookup refused for want of a slot was remembered as the registry's failure")
	}
}

func mustNetworks(t *testing.T, cidrs ...string) []netip.Prefix {
	t.Helper()
	p, err := ParseNetworks(cidrs)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
