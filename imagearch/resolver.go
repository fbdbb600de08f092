package imagearch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// Defaults of Config.
const (
	defaultTagTTL      = 10 * time.Minute
	defaultNegativeTTL = 30 * time.Second
	defaultMaxEntries  = 4096
	// defaultFetchTimeout bounds one registry lookup, however long its callers wait.
	defaultFetchTimeout = 10 * time.Second
	// bytesPerEntry bounds the answer cache in bytes with its entries: MaxEntries
	// references of at most maxReferenceBytes each.
	bytesPerEntry = 2 << 10
	// maxFailures and maxFailureBytes bound the failure cache, kept apart from the
	// answers so that failing lookups (many distinct tags of a hostile registry) never
	// push other images' answers out.
	maxFailures     = 1024
	maxFailureBytes = 512 << 10
	// maxReferenceBytes bounds an image reference looked up (Docker's own limits sum to
	// less: a 255-byte repository, a 128-byte tag, a host name).
	maxReferenceBytes = 1024
)

// Config configures a Resolver.
type Config struct {
	// PullSecrets reads registries with the pod's and its ServiceAccount's
	// imagePullSecrets, through Kube; off: anonymous and ECR credentials only.
	PullSecrets bool
	// Kube reads the pull secrets and ServiceAccounts (with PullSecrets).
	Kube kubernetes.Interface
	// TagTTL is how long a tag's answer is kept (a digest's is kept for ever).
	TagTTL time.Duration
	// NegativeTTL is how long a failed lookup is remembered before it is tried again.
	NegativeTTL time.Duration
	// MaxEntries bounds the cache; the least recently used answer goes first.
	MaxEntries int
	// FetchTimeout bounds one lookup in the background.
	FetchTimeout time.Duration
	// Insecure lists registries (host[:port]) reached over plain HTTP. Every other
	// registry is reached over HTTPS only. A listed registry may be on any address.
	Insecure []string
	// Internal lists registries (host[:port]) reached over HTTPS though they resolve to
	// loopback, link-local or RefusedNetworks addresses; every other registry that does
	// is refused.
	Internal []string
	// RefusedNetworks are the networks no registry outside Internal and Insecure may
	// resolve to: the cluster's service and pod ranges. Loopback, link-local,
	// unspecified and multicast addresses are always refused.
	RefusedNetworks []netip.Prefix
	// Transport is the HTTP transport to registries (default http.DefaultTransport's
	// settings). It is cloned, and its dialer and time-outs replaced.
	Transport *http.Transport
	// ECREndpoint overrides the ECR API endpoint (tests); empty: the SDK's own, which
	// honours AWS_ENDPOINT_URL_ECR.
	ECREndpoint string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// MetricsNamespace prefixes the metric names (Register).
	MetricsNamespace string
}

// smallPod is the container count up to which PodRequest de-duplicates by search
// (at most smallPod² comparisons) rather than with a map.
const smallPod = 16

// MaxImagesPerPod bounds the distinct images looked up for one pod: a pod naming more
// is answered errTooManyImages without any lookup (real pods name a handful).
const MaxImagesPerPod = 32

// errTooManyImages is the answer for a request naming more than MaxImagesPerPod
// distinct images: their architectures are not looked up.
var errTooManyImages = fmt.Errorf("the pod names more than %d distinct images; their architectures are not looked up", MaxImagesPerPod)

// Request is what a lookup needs: the images, and where their credentials are.
type Request struct {
	Namespace      string
	ServiceAccount string
	PullSecrets    []string
	Images         []string
	// MoreImages says the pod names more distinct images than MaxImagesPerPod; Images
	// then holds only the first MaxImagesPerPod+1 of them.
	MoreImages bool
}

// PodRequest is the Request of a pod: the images of its init containers and
// containers (each once, in order, at most MaxImagesPerPod+1), its imagePullSecrets
// and ServiceAccount. Its work is linear in the spec.
func PodRequest(namespace string, spec *corev1.PodSpec) Request {
	r := Request{Namespace: namespace, ServiceAccount: spec.ServiceAccountName}
	for _, s := range spec.ImagePullSecrets {
		r.PullSecrets = append(r.PullSecrets, s.Name)
	}
	// A map only for big pods: the usual handful is searched in place, allocation-free
	// on the admission path.
	var seen map[string]struct{}
	if len(spec.InitContainers)+len(spec.Containers) > smallPod {
		seen = make(map[string]struct{}, MaxImagesPerPod+1)
	}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			if c.Image == "" {
				continue
			}
			if seen != nil {
				if _, dup := seen[c.Image]; dup {
					continue
				}
			} else if slices.Contains(r.Images, c.Image) {
				continue
			}
			if len(r.Images) > MaxImagesPerPod {
				// One more than the cap is enough to say so; the rest is not read.
				r.MoreImages = true
				return r
			}
			if seen != nil {
				seen[c.Image] = struct{}{}
			}
			r.Images = append(r.Images, c.Image)
		}
	}
	r.MoreImages = len(r.Images) > MaxImagesPerPod
	return r
}

// Resolver looks up the architectures of images. Safe for concurrent use; create it
// with New.
type Resolver struct {
	cfg      Config
	insecure map[string]bool
	remote   http.RoundTripper
	cache    *cache
	failures *cache
	flights  singleflight.Group
	slots    *slots
	ecr      *ecrTokens
	metrics  *metrics
}

// New returns a Resolver with cfg's zero values defaulted.
func New(cfg Config) *Resolver {
	if cfg.TagTTL <= 0 {
		cfg.TagTTL = defaultTagTTL
	}
	if cfg.NegativeTTL <= 0 {
		cfg.NegativeTTL = defaultNegativeTTL
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = defaultMaxEntries
	}
	if cfg.FetchTimeout <= 0 {
		cfg.FetchTimeout = defaultFetchTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Resolver{cfg: cfg, insecure: map[string]bool{},
		cache: newCache(cfg.MaxEntries, cfg.MaxEntries*bytesPerEntry), failures: newCache(maxFailures, maxFailureBytes),
		slots: newSlots(), ecr: newECRTokens(cfg.ECREndpoint, cfg.Now)}
	r.metrics = newMetrics(cfg.MetricsNamespace, r.CacheEntries)
	dest := &destinations{listed: map[string]bool{}, refused: cfg.RefusedNetworks}
	for _, h := range cfg.Insecure {
		if h = strings.ToLower(strings.TrimSpace(h)); h != "" {
			r.insecure[h] = true
			dest.listed[h] = true
		}
	}
	for _, h := range cfg.Internal {
		if h = strings.ToLower(strings.TrimSpace(h)); h != "" {
			dest.listed[h] = true
		}
	}
	// The one transport of every registry request, redirects and token fetches
	// included: go-containerregistry wraps it (retries, user agent) and builds its
	// http.Clients on it.
	r.remote = &guard{next: newBaseTransport(cfg.Transport, dest), insecure: r.insecure}
	return r
}

// Architectures returns the sorted architectures every image of req supports, from the
// cache or the registries. It returns when ctx ends (the caller's budget) with ctx's
// error; the lookups it started go on and fill the cache. A request without images
// answers nil.
func (r *Resolver) Architectures(ctx context.Context, req Request) ([]string, error) {
	if req.MoreImages || len(req.Images) > MaxImagesPerPod {
		r.metrics.lookups.WithLabelValues(resultTooMany).Inc()
		return nil, errTooManyImages
	}
	var common []string
	for i, image := range req.Images {
		arches, err := r.image(ctx, req, image)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", image, err)
		}
		if i == 0 {
			common = arches
			continue
		}
		common = Intersect(common, arches)
	}
	return common, nil
}

// image answers one image.
func (r *Resolver) image(ctx context.Context, req Request, image string) ([]string, error) {
	// Keyed by the reference as the pod spells it: a hit costs no parsing (two
	// spellings of one image take two entries).
	key := image
	now := r.cfg.Now()
	if e, ok := r.cache.get(key, now); ok {
		r.metrics.lookups.WithLabelValues(resultCached).Inc()
		return slices.Clone(e.arches), nil
	}
	if len(image) > maxReferenceBytes {
		r.metrics.lookups.WithLabelValues(resultInvalid).Inc()
		return nil, fmt.Errorf("invalid image reference: longer than %d bytes", maxReferenceBytes)
	}
	ref, err := r.parse(image)
	if err != nil {
		r.metrics.lookups.WithLabelValues(resultInvalid).Inc()
		return nil, err
	}
	// Failures are remembered per credentials: a pod without the pull secret another
	// one has must not answer for it.
	failKey := key + "\x00" + req.credentialsKey()
	if e, ok := r.failures.get(failKey, now); ok {
		r.metrics.lookups.WithLabelValues(resultCachedFailure).Inc()
		return nil, e.err
	}
	ch := r.flights.DoChan(failKey, func() (any, error) {
		return r.fetch(ref, req, key, failKey)
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		return slices.Clone(res.Val.([]string)), nil
	case <-ctx.Done():
		r.metrics.lookups.WithLabelValues(resultGaveUp).Inc()
		return nil, fmt.Errorf("no answer from the registry in time (%w); looking it up in the background", ctx.Err())
	}
}

// credentialsKey identifies where the request's credentials come from, in a fixed
// size (a pod may name many pull secrets).
func (req Request) credentialsKey() string {
	h := sha256.New()
	for _, s := range append([]string{req.Namespace, req.ServiceAccount}, req.PullSecrets...) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// parse reads an image reference; a registry listed as insecure is reached over HTTP.
func (r *Resolver) parse(image string) (name.Reference, error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return nil, fmt.Errorf("invalid image reference: %w", err)
	}
	if r.insecure[strings.ToLower(ref.Context().RegistryStr())] {
		return name.ParseReference(image, name.Insecure)
	}
	return ref, nil
}

// fetch looks one reference up in its registry, detached from any caller, and
// remembers the answer: a digest for ever, a tag for TagTTL, a failure for NegativeTTL.
func (r *Resolver) fetch(ref name.Reference, req Request, key, failKey string) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.FetchTimeout)
	defer cancel()
	start := r.cfg.Now()
	arches, err := r.read(ctx, ref, req)
	if errors.Is(err, errBusy) {
		// Not the registry's failure: the next pod tries again.
		r.metrics.lookups.WithLabelValues(resultBusy).Inc()
		return nil, err
	}
	r.metrics.duration.Observe(r.cfg.Now().Sub(start).Seconds())
	if err != nil {
		r.metrics.lookups.WithLabelValues(resultFailed).Inc()
		r.failures.put(entry{key: failKey, err: err, expires: r.cfg.Now().Add(r.cfg.NegativeTTL)})
		return nil, err
	}
	r.metrics.lookups.WithLabelValues(resultFetched).Inc()
	e := entry{key: key, arches: arches}
	if _, pinned := ref.(name.Digest); !pinned {
		e.expires = r.cfg.Now().Add(r.cfg.TagTTL)
	}
	r.cache.put(e)
	return arches, nil
}

// read gets the reference's manifest and the architectures it names: an index's
// linux platforms, or a single image's config.
// Every error it returns is a RegistryError (or wraps errBusy, or an authentication
// error of our own): nothing the registry sent.
func (r *Resolver) read(ctx context.Context, ref name.Reference, req Request) ([]string, error) {
	registry := ref.Context().RegistryStr()
	release, err := r.slots.acquire(ctx, strings.ToLower(registry), req.Namespace)
	if err != nil {
		return nil, err
	}
	defer release()
	auth, err := r.authenticator(ctx, ref, req)
	if err != nil {
		return nil, err
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuth(auth), remote.WithTransport(r.remote),
		remote.WithUserAgent("custom-kube-scheduler-webhook")}
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return nil, registryError(registry, err)
	}
	var arches []string
	switch {
	case desc.MediaType.IsIndex():
		arches, err = architecturesOfIndex(desc.Manifest)
	case desc.MediaType.IsImage():
		img, ierr := desc.Image()
		if ierr != nil {
			return nil, registryError(registry, ierr)
		}
		raw, cerr := img.RawConfigFile()
		if cerr != nil {
			return nil, registryError(registry, cerr)
		}
		arches, err = architectureOfConfig(raw)
	default:
		err = fmt.Errorf("manifest of media type %q names no platform", short(string(desc.MediaType)))
	}
	if err != nil {
		// Our own words about what was read, bounded (short).
		return nil, &RegistryError{Registry: registry, Reason: err.Error()}
	}
	return arches, nil
}

// authenticator picks the credentials of ref's registry: the request's pull secrets
// (with Kube), else an ECR token for an ECR host, else anonymous.
func (r *Resolver) authenticator(ctx context.Context, ref name.Reference, req Request) (authn.Authenticator, error) {
	registry := strings.ToLower(ref.Context().RegistryStr())
	if r.cfg.PullSecrets && r.cfg.Kube != nil && (len(req.PullSecrets) > 0 || req.ServiceAccount != "") {
		creds, err := pullSecrets(ctx, r.cfg.Kube, req)
		if err != nil {
			return nil, err
		}
		if auth, ok := creds[registry]; ok {
			return auth, nil
		}
	}
	if region, ok := ecrRegion(registry); ok {
		return r.ecr.authenticator(ctx, region)
	}
	return authn.Anonymous, nil
}

// CacheEntries is how many answers the cache holds, failures included.
func (r *Resolver) CacheEntries() int { return r.cache.len() + r.failures.len() }

// Register registers the lookup metrics on reg.
func (r *Resolver) Register(reg prometheus.Registerer) error {
	for _, c := range r.metrics.collectors() {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register image lookup metrics: %w", err)
		}
	}
	return nil
}
