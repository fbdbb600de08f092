package admissiontoken

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Keys of the token Secret.
const (
	// keyToken is the current token, the one in the configurations' paths.
	keyToken = "token"
	// keyPrevious is the token before the last rotation, accepted until keyPreviousUntil.
	keyPrevious      = "previous"
	keyPreviousUntil = "previous-until"
	// keySwitchAfter is when the configurations move to the current token.
	keySwitchAfter = "switch-after"
	// keyCertNotBefore is the NotBefore of the serving certificate the current token
	// goes with: a newer certificate rotates the token.
	keyCertNotBefore = "cert-not-before"
)

// Defaults of Config's timings.
const (
	defaultInterval    = 2 * time.Second
	defaultPropagation = 15 * time.Second
	defaultOverlap     = 10 * time.Minute
)

// fieldManager is recorded on the Secret and the configurations the Keeper writes.
const fieldManager = "custom-kube-scheduler-webhook"

// Config says where the token lives and how it rotates.
type Config struct {
	Client     kubernetes.Interface
	Namespace  string
	SecretName string
	// MutatingConfig and ValidatingConfig are the configurations whose clientConfig
	// path carries the token; empty skips one.
	MutatingConfig, ValidatingConfig string
	// Certificate returns the serving certificate (nil: no rotation with it).
	Certificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// Interval is how often the Secret is read (defaultInterval); Propagation how long
	// after a rotation the configurations move to the new token (defaultPropagation,
	// several Intervals: every replica has read it by then); Overlap how long the
	// previous token stays accepted (defaultOverlap: the API server has seen the new
	// paths by then).
	Interval, Propagation, Overlap time.Duration
	// Now is the clock (time.Now).
	Now func() time.Time
	Log logrus.FieldLogger
}

// Keeper holds the tokens this replica accepts.
type Keeper struct {
	cfg      Config
	accepted atomic.Pointer[[]string]
}

// New checks cfg and returns a Keeper that accepts nothing until its first Sync.
func New(cfg Config) (*Keeper, error) {
	if cfg.Client == nil || cfg.Namespace == "" || cfg.SecretName == "" {
		return nil, errors.New("admission token: a client, a namespace and a Secret name are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = defaultInterval
	}
	if cfg.Propagation <= 0 {
		cfg.Propagation = defaultPropagation
	}
	if cfg.Overlap <= cfg.Propagation {
		cfg.Overlap = max(defaultOverlap, 2*cfg.Propagation)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = logrus.New()
	}
	return &Keeper{cfg: cfg}, nil
}

// Allows reports whether token opens the door. It compares in constant time.
func (k *Keeper) Allows(token string) bool {
	list := k.accepted.Load()
	if list == nil || token == "" {
		return false
	}
	ok := 0
	for _, t := range *list {
		ok |= subtle.ConstantTimeCompare([]byte(t), []byte(token))
	}
	return ok == 1
}

// Synced reports whether the tokens have been read once: a replica is not ready before.
func (k *Keeper) Synced() bool { return k.accepted.Load() != nil }

// Run syncs every Interval until ctx ends.
func (k *Keeper) Run(ctx context.Context) {
	for failures := 0; ; {
		if err := k.Sync(ctx); err != nil {
			failures++
			if failures == 1 || failures%30 == 0 {
				k.cfg.Log.WithError(err).Error("admission token: keeping the tokens read before")
			}
		} else {
			failures = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(k.cfg.Interval):
		}
	}
}

// Sync reads the Secret, fills in or rotates the token, updates the accepted tokens and,
// once the propagation delay has passed, the configurations' paths.
func (k *Keeper) Sync(ctx context.Context) error {
	secrets := k.cfg.Client.CoreV1().Secrets(k.cfg.Namespace)
	s, err := secrets.Get(ctx, k.cfg.SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: k.cfg.SecretName, Namespace: k.cfg.Namespace}, Type: corev1.SecretTypeOpaque}
		s.Data = k.fresh(nil)
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
			return fmt.Errorf("admission token: creating Secret %s/%s: %w", k.cfg.Namespace, k.cfg.SecretName, err)
		}
		k.cfg.Log.WithField("secret", k.cfg.SecretName).Info("admission token created")
		return k.Sync(ctx)
	}
	if err != nil {
		return fmt.Errorf("admission token: reading Secret %s/%s: %w", k.cfg.Namespace, k.cfg.SecretName, err)
	}
	if data, why := k.next(s.Data); data != nil {
		s = s.DeepCopy()
		s.Data = data
		if s, err = secrets.Update(ctx, s, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
			// A conflict: another replica wrote first; the next Sync reads its token.
			return fmt.Errorf("admission token: writing Secret %s/%s (%s): %w", k.cfg.Namespace, k.cfg.SecretName, why, err)
		}
		k.cfg.Log.WithField("secret", k.cfg.SecretName).Info("admission token " + why)
	}
	now := k.cfg.Now()
	accepted := []string{string(s.Data[keyToken])}
	if prev := string(s.Data[keyPrevious]); prev != "" && now.Before(parseTime(s.Data[keyPreviousUntil])) {
		accepted = append(accepted, prev)
	}
	k.accepted.Store(&accepted)
	if now.Before(parseTime(s.Data[keySwitchAfter])) {
		return nil
	}
	return k.inject(ctx, string(s.Data[keyToken]))
}

// next is the Secret's data after filling in or rotating its token, and why; nil when
// nothing changes.
func (k *Keeper) next(data map[string][]byte) (map[string][]byte, string) {
	if !validToken(string(data[keyToken])) {
		return k.fresh(nil), "filled in"
	}
	leaf := k.leaf()
	if leaf == nil {
		return nil, ""
	}
	recorded := parseTime(data[keyCertNotBefore])
	switch {
	case recorded.IsZero():
		out := clone(data)
		out[keyCertNotBefore] = []byte(leaf.NotBefore.UTC().Format(time.RFC3339))
		return out, "tied to the serving certificate"
	case leaf.NotBefore.After(recorded):
		// A renewed certificate; a replica still on the older one never rotates back.
		now := k.cfg.Now()
		out := k.fresh(leaf)
		out[keyPrevious] = data[keyToken]
		out[keyPreviousUntil] = []byte(now.Add(k.cfg.Overlap).UTC().Format(time.RFC3339))
		out[keySwitchAfter] = []byte(now.Add(k.cfg.Propagation).UTC().Format(time.RFC3339))
		return out, "rotated with the serving certificate"
	}
	return nil, ""
}

// fresh is the data of a new token that the configurations may use at once.
func (k *Keeper) fresh(leaf *x509.Certificate) map[string][]byte {
	out := map[string][]byte{keyToken: []byte(newToken()), keySwitchAfter: []byte(k.cfg.Now().UTC().Format(time.RFC3339))}
	if leaf == nil {
		leaf = k.leaf()
	}
	if leaf != nil {
		out[keyCertNotBefore] = []byte(leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return out
}

func (k *Keeper) leaf() *x509.Certificate {
	if k.cfg.Certificate == nil {
		return nil
	}
	c, err := k.cfg.Certificate(nil)
	if err != nil || c == nil || len(c.Certificate) == 0 {
		return nil
	}
	if c.Leaf != nil {
		return c.Leaf
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return nil
	}
	return leaf
}

// inject writes token into the clientConfig path of every webhook of both
// configurations.
func (k *Keeper) inject(ctx context.Context, token string) error {
	reg := k.cfg.Client.AdmissionregistrationV1()
	if name := k.cfg.MutatingConfig; name != "" {
		c, err := reg.MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("admission token: reading MutatingWebhookConfiguration %s: %w", name, err)
		default:
			changed := false
			for i := range c.Webhooks {
				changed = setPath(&c.Webhooks[i].ClientConfig, token, Endpoint(false, c.Webhooks[i].Name)) || changed
			}
			if changed {
				if _, err := reg.MutatingWebhookConfigurations().Update(ctx, c, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
					return fmt.Errorf("admission token: writing MutatingWebhookConfiguration %s: %w", name, err)
				}
				k.cfg.Log.WithField("configuration", name).Info("admission token written into the mutating webhook's path")
			}
		}
	}
	if name := k.cfg.ValidatingConfig; name != "" {
		c, err := reg.ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("admission token: reading ValidatingWebhookConfiguration %s: %w", name, err)
		default:
			changed := false
			for i := range c.Webhooks {
				changed = setPath(&c.Webhooks[i].ClientConfig, token, Endpoint(true, c.Webhooks[i].Name)) || changed
			}
			if changed {
				if _, err := reg.ValidatingWebhookConfigurations().Update(ctx, c, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
					return fmt.Errorf("admission token: writing ValidatingWebhookConfiguration %s: %w", name, err)
				}
				k.cfg.Log.WithField("configuration", name).Info("admission token written into the validating webhook's path")
			}
		}
	}
	return nil
}

// notEnabledPrefix begins the name of the validating webhook that only warns about
// workloads in namespaces that are not enabled (the chart's not-enabled.workloads...).
const notEnabledPrefix = "not-enabled."

// Endpoint is the last segment of the path a webhook entry is served at, after the
// token: "mutate" for a mutating entry, "not-enabled" for the not-enabled warning,
// "validate" for the other validating ones. It follows from the entry's name, not
// from its path: the chart renders no path (the webhook owns the field, so a GitOps
// tool sees no drift), and a path some other writer left must not decide it.
func Endpoint(validating bool, webhookName string) string {
	switch {
	case !validating:
		return "mutate"
	case strings.HasPrefix(webhookName, notEnabledPrefix):
		return "not-enabled"
	}
	return "validate"
}

// setPath makes cc's path /<token>/<endpoint>; it reports whether it changed anything.
func setPath(cc *admissionregistrationv1.WebhookClientConfig, token, endpoint string) bool {
	want := "/" + token + "/" + endpoint
	switch {
	case cc.Service != nil:
		if cc.Service.Path != nil && *cc.Service.Path == want {
			return false
		}
		cc.Service.Path = &want
		return true
	case cc.URL != nil:
		u, err := url.Parse(*cc.URL)
		if err != nil || u.Path == want {
			return false
		}
		u.Path = want
		s := u.String()
		cc.URL = &s
		return true
	}
	return false
}

// newToken returns a fresh token: 26 characters of base32, 130 random bits, fit for a
// URL path segment.
func newToken() string { return strings.ToLower(rand.Text()) }

// validToken: a path segment of letters and digits, long enough to be a secret.
func validToken(t string) bool {
	if len(t) < 20 {
		return false
	}
	for _, r := range t {
		if !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || 'A' <= r && r <= 'Z') {
			return false
		}
	}
	return true
}

func parseTime(b []byte) time.Time {
	t, err := time.Parse(time.RFC3339, string(b))
	if err != nil {
		return time.Time{}
	}
	return t
}

func clone(m map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}
