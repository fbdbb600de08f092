package imagearch

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ecr"
	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// dockerHub is the registry name go-containerregistry gives Docker Hub references.
const dockerHub = "index.docker.io"

// registryKey normalizes a docker config key (a host, a URL, Docker Hub's legacy
// https://index.docker.io/v1/) to the registry name a reference carries.
func registryKey(k string) string {
	k = strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(k), "https://"), "http://")
	if i := strings.IndexByte(k, '/'); i >= 0 {
		k = k[:i]
	}
	switch k = strings.ToLower(k); k {
	case "docker.io", "registry-1.docker.io":
		return dockerHub
	}
	return k
}

// dockerAuth is one registry's entry of a docker config.
type dockerAuth struct {
	Username string `json:"username"`
	Password string `json:"password"`
	Auth     string `json:"auth"`
}

func (a dockerAuth) authenticator() (authn.Authenticator, bool) {
	if a.Username == "" && a.Auth != "" {
		raw, err := base64.StdEncoding.DecodeString(a.Auth)
		if err != nil {
			return nil, false
		}
		user, pass, ok := strings.Cut(string(raw), ":")
		if !ok {
			return nil, false
		}
		a.Username, a.Password = user, pass
	}
	if a.Username == "" {
		return nil, false
	}
	return &authn.Basic{Username: a.Username, Password: a.Password}, true
}

// credentials maps a registry name to the first credentials given for it.
type credentials map[string]authn.Authenticator

// addSecret adds the registries of an image pull Secret (kubernetes.io/dockerconfigjson
// or the legacy kubernetes.io/dockercfg) not given by an earlier one, as the kubelet
// tries pull secrets in order.
func (c credentials) addSecret(s *corev1.Secret) error {
	var auths map[string]dockerAuth
	switch s.Type {
	case corev1.SecretTypeDockerConfigJson:
		var cfg struct {
			Auths map[string]dockerAuth `json:"auths"`
		}
		if err := json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &cfg); err != nil {
			return fmt.Errorf("secret %s/%s: %s: %w", s.Namespace, s.Name, corev1.DockerConfigJsonKey, err)
		}
		auths = cfg.Auths
	case corev1.SecretTypeDockercfg:
		if err := json.Unmarshal(s.Data[corev1.DockerConfigKey], &auths); err != nil {
			return fmt.Errorf("secret %s/%s: %s: %w", s.Namespace, s.Name, corev1.DockerConfigKey, err)
		}
	default:
		return nil // not a pull secret: the kubelet ignores it too
	}
	for k, a := range auths {
		key := registryKey(k)
		if _, seen := c[key]; seen {
			continue
		}
		if auth, ok := a.authenticator(); ok {
			c[key] = auth
		}
	}
	return nil
}

// pullSecrets reads the credentials of a pod's imagePullSecrets, then its
// ServiceAccount's (the ServiceAccount admission plugin has usually copied those onto
// the pod already; a workload's template, read at apply time, does not have them). A
// missing Secret or ServiceAccount is skipped, as the kubelet skips it.
func pullSecrets(ctx context.Context, kube kubernetes.Interface, req Request) (credentials, error) {
	creds := credentials{}
	names := append([]string(nil), req.PullSecrets...)
	if req.ServiceAccount != "" {
		sa, err := kube.CoreV1().ServiceAccounts(req.Namespace).Get(ctx, req.ServiceAccount, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("read ServiceAccount %s/%s for its imagePullSecrets: %w", req.Namespace, req.ServiceAccount, err)
		default:
			for _, ref := range sa.ImagePullSecrets {
				names = append(names, ref.Name)
			}
		}
	}
	seen := map[string]bool{}
	for _, name := range names {
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		s, err := kube.CoreV1().Secrets(req.Namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("read image pull secret %s/%s: %w", req.Namespace, name, err)
		}
		if err := creds.addSecret(s); err != nil {
			return nil, err
		}
	}
	return creds, nil
}

// ecrHost matches an ECR private registry: <account>.dkr.ecr[-fips].<region>.amazonaws.com[.cn].
var ecrHost = regexp.MustCompile(`^([0-9]{12})\.dkr\.ecr(?:-fips)?\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?(?::[0-9]+)?$`)

// ecrRegion returns the region of an ECR registry name, and whether it is one.
func ecrRegion(registry string) (string, bool) {
	m := ecrHost.FindStringSubmatch(strings.ToLower(registry))
	if m == nil {
		return "", false
	}
	return m[2], true
}

// ecrAPI is the call made to ECR.
type ecrAPI interface {
	GetAuthorizationToken(ctx context.Context, in *ecr.GetAuthorizationTokenInput, opts ...func(*ecr.Options)) (*ecr.GetAuthorizationTokenOutput, error)
}

// ecrToken is a registry password handed out by GetAuthorizationToken.
type ecrToken struct {
	auth    authn.Authenticator
	refresh time.Time
}

// ecrTokens hands out ECR authorization tokens per region, each fetched once and kept
// until shortly before it expires (ECR's last 12 hours).
type ecrTokens struct {
	// client returns the ECR client of a region.
	client func(ctx context.Context, region string) (ecrAPI, error)
	now    func() time.Time

	mu     sync.Mutex
	tokens map[string]ecrToken
}

// newECRTokens uses the AWS SDK's default credential chain (the webhook's IRSA or Pod
// Identity role, else the node's), endpoint (AWS_ENDPOINT_URL_ECR) and retries.
func newECRTokens(endpoint string, now func() time.Time) *ecrTokens {
	var (
		once    sync.Once
		cfg     aws.Config
		loadErr error
	)
	return &ecrTokens{now: now, tokens: map[string]ecrToken{}, client: func(ctx context.Context, region string) (ecrAPI, error) {
		once.Do(func() { cfg, loadErr = awsconfig.LoadDefaultConfig(ctx) })
		if loadErr != nil {
			return nil, fmt.Errorf("load AWS configuration: %w", loadErr)
		}
		return ecr.NewFromConfig(cfg, func(o *ecr.Options) {
			o.Region = region
			if endpoint != "" {
				o.BaseEndpoint = aws.String(endpoint)
			}
		}), nil
	}}
}

// authenticator returns the credentials of ECR registry in region.
func (t *ecrTokens) authenticator(ctx context.Context, region string) (authn.Authenticator, error) {
	t.mu.Lock()
	tok, ok := t.tokens[region]
	t.mu.Unlock()
	if ok && t.now().Before(tok.refresh) {
		return tok.auth, nil
	}
	client, err := t.client(ctx, region)
	if err != nil {
		return nil, err
	}
	out, err := client.GetAuthorizationToken(ctx, &ecr.GetAuthorizationTokenInput{})
	if err != nil {
		return nil, fmt.Errorf("ECR GetAuthorizationToken in %s: %w", region, err)
	}
	if len(out.AuthorizationData) == 0 || out.AuthorizationData[0].AuthorizationToken == nil {
		return nil, fmt.Errorf("ECR GetAuthorizationToken in %s: no token in the answer", region)
	}
	data := out.AuthorizationData[0]
	raw, err := base64.StdEncoding.DecodeString(aws.ToString(data.AuthorizationToken))
	if err != nil {
		return nil, fmt.Errorf("ECR authorization token in %s: %w", region, err)
	}
	user, pass, found := strings.Cut(string(raw), ":")
	if !found {
		return nil, errors.New("ECR authorization token is not user:password")
	}
	// Refreshed a quarter of its life before it expires (an hour without an expiry).
	refresh := t.now().Add(time.Hour)
	if data.ExpiresAt != nil {
		refresh = data.ExpiresAt.Add(-data.ExpiresAt.Sub(t.now()) / 4)
	}
	tok = ecrToken{auth: &authn.Basic{Username: user, Password: pass}, refresh: refresh}
	t.mu.Lock()
	t.tokens[region] = tok
	t.mu.Unlock()
	return tok.auth, nil
}
