// Command ecrlocal is a local stand-in for the Amazon ECR API, for the test of
// build_and_push.sh's ECR path (scripts/image/ecr-test.sh). It speaks ECR's JSON 1.1
// protocol (POST /, X-Amz-Target: AmazonEC2ContainerRegistry_V20150921.<Op>, content
// type application/x-amz-json-1.1, SigV4-signed) to the real AWS CLI, on loopback.
//
// It serves the calls build_and_push.sh makes and nothing else:
//
//   - DescribeRepositories: the repositories created here; RepositoryNotFoundException
//     for a missing one.
//   - CreateRepository: records the tag mutability, scan-on-push and encryption settings
//     asked for; RepositoryAlreadyExistsException for an existing one.
//   - GetAuthorizationToken: base64("AWS:<password>") and a proxyEndpoint naming the
//     local registry (-registry) that accepts that password.
//   - BatchGetImage: reads the tags asked for from that registry (HTTP basic auth,
//     user AWS), as ECR's API and registry share one store; ImageNotFound failures for
//     the missing ones.
//
// Any other operation answers UnknownOperationException. Requests must be signed
// (SigV4) with -access-key-id and -secret-access-key for -region and the service "ecr":
// a request signed for another region answers InvalidSignatureException, as ECR does.
// Every call is logged as one JSON line to -calls, so a test can check which operations
// a script used; the repositories are written to -state after every change.
//
// It is test tooling, not part of the webhook.
package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// targetPrefix is the X-Amz-Target prefix of every ECR operation.
const targetPrefix = "AmazonEC2ContainerRegistry_V20150921."

// jsonContentType is the content type of ECR's requests and answers.
const jsonContentType = "application/x-amz-json-1.1"

// repositoryName is ECR's pattern for repository names.
var repositoryName = regexp.MustCompile(`^(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*$`)

// Config is what a Server answers with and checks requests against.
type Config struct {
	// Region is the only region requests may be signed for.
	Region string
	// Account is the registry ID (AWS account) of the only registry served.
	Account string
	// AccessKeyID and SecretAccessKey are the only credentials accepted.
	AccessKeyID, SecretAccessKey string
	// Registry is the registry's base URL (https://HOST:PORT): GetAuthorizationToken's
	// proxyEndpoint, and where BatchGetImage reads manifests.
	Registry string
	// Password is the registry password of user AWS, handed out in the token.
	Password string
	// RegistryClient reads manifests from Registry (default http.DefaultClient).
	RegistryClient *http.Client
	// Calls receives one JSON line per call (may be nil).
	Calls io.Writer
	// StateFile, when set, is rewritten with the repositories after every change.
	StateFile string
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Repository is a repository as ECR describes it.
type Repository struct {
	RepositoryArn              string         `json:"repositoryArn"`
	RegistryID                 string         `json:"registryId"`
	RepositoryName             string         `json:"repositoryName"`
	RepositoryURI              string         `json:"repositoryUri"`
	CreatedAt                  float64        `json:"createdAt"`
	ImageTagMutability         string         `json:"imageTagMutability"`
	ImageScanningConfiguration map[string]any `json:"imageScanningConfiguration"`
	EncryptionConfiguration    map[string]any `json:"encryptionConfiguration"`
}

// Call is one line of the call log.
type Call struct {
	Op      string          `json:"op"`
	Status  int             `json:"status"`
	Error   string          `json:"error,omitempty"`
	Request json.RawMessage `json:"request,omitempty"`
}

// Server is the ECR API stand-in; it is an http.Handler.
type Server struct {
	cfg   Config
	mu    sync.Mutex
	repos map[string]*Repository
	order []string
}

// NewServer returns a Server for cfg, with no repositories.
func NewServer(cfg Config) *Server {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RegistryClient == nil {
		cfg.RegistryClient = http.DefaultClient
	}
	return &Server{cfg: cfg, repos: map[string]*Repository{}}
}

// apiError is an ECR error answer: HTTP status and the `__type` code.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func clientError(code, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: code, message: fmt.Sprintf(format, args...)}
}

// ServeHTTP answers one ECR API call and logs it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), targetPrefix)
	var out any
	if err != nil {
		err = clientError("SerializationException", "reading the request: %v", err)
	} else {
		out, err = s.handle(r, op, body)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	call := Call{Op: op, Status: http.StatusOK}
	if json.Valid(body) {
		call.Request = body
	}
	w.Header().Set("Content-Type", jsonContentType)
	w.Header().Set("X-Amzn-RequestId", fmt.Sprintf("ecrlocal-%d", s.cfg.Now().UnixNano()))
	var ae *apiError
	switch {
	case err == nil:
		_ = json.NewEncoder(w).Encode(out)
	case errors.As(err, &ae):
		call.Status, call.Error = ae.status, ae.code
		w.WriteHeader(ae.status)
		_ = json.NewEncoder(w).Encode(map[string]string{"__type": ae.code, "message": ae.message})
	default:
		call.Status, call.Error = http.StatusInternalServerError, "ServerException"
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(map[string]string{"__type": "ServerException", "message": err.Error()})
	}
	if s.cfg.Calls != nil {
		line, _ := json.Marshal(call)
		_, _ = s.cfg.Calls.Write(append(line, '\n'))
	}
}

// handle checks the request's protocol and signature, then runs the operation.
func (s *Server) handle(r *http.Request, op string, body []byte) (any, error) {
	if r.Method != http.MethodPost || r.URL.Path != "/" {
		return nil, clientError("UnknownOperationException", "%s %s is not an ECR API call", r.Method, r.URL.Path)
	}
	if !strings.HasPrefix(r.Header.Get("X-Amz-Target"), targetPrefix) {
		return nil, clientError("UnknownOperationException", "X-Amz-Target %q is not an ECR operation", r.Header.Get("X-Amz-Target"))
	}
	if ct := r.Header.Get("Content-Type"); ct != jsonContentType {
		return nil, clientError("SerializationException", "content type %q, want %s", ct, jsonContentType)
	}
	if err := s.verifySignature(r, body); err != nil {
		return nil, err
	}
	var in map[string]any
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, clientError("SerializationException", "request body: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch op {
	case "DescribeRepositories":
		return s.describeRepositories(in)
	case "CreateRepository":
		return s.createRepository(in)
	case "GetAuthorizationToken":
		return s.getAuthorizationToken(in)
	case "BatchGetImage":
		return s.batchGetImage(r.Context(), in)
	default:
		return nil, clientError("UnknownOperationException", "operation %s is not served here", op)
	}
}

// verifySignature checks the request's SigV4 signature: the access key, the scope
// (date/region/ecr/aws4_request) and the signature over the canonical request.
func (s *Server) verifySignature(r *http.Request, body []byte) error {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return clientError("MissingAuthenticationTokenException", "Missing Authentication Token")
	}
	const algorithm = "AWS4-HMAC-SHA256"
	rest, ok := strings.CutPrefix(auth, algorithm+" ")
	if !ok {
		return clientError("IncompleteSignatureException", "unsupported Authorization %q", strings.SplitN(auth, " ", 2)[0])
	}
	fields := map[string]string{}
	for _, part := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || fields["SignedHeaders"] == "" || fields["Signature"] == "" {
		return clientError("IncompleteSignatureException", "Authorization header is missing Credential, SignedHeaders or Signature")
	}
	key, date, region, service := scope[0], scope[1], scope[2], scope[3]
	if key != s.cfg.AccessKeyID {
		return clientError("UnrecognizedClientException", "The security token included in the request is invalid.")
	}
	if region != s.cfg.Region {
		return clientError("InvalidSignatureException", "Credential should be scoped to a valid region, not '%s'.", region)
	}
	if service != "ecr" || scope[4] != "aws4_request" {
		return clientError("InvalidSignatureException", "Credential should be scoped to correct service: 'ecr'.")
	}
	amzDate := r.Header.Get("X-Amz-Date")
	if !strings.HasPrefix(amzDate, date) {
		return clientError("InvalidSignatureException", "X-Amz-Date %q does not match the credential's date %s", amzDate, date)
	}
	var canon strings.Builder
	canon.WriteString(r.Method + "\n" + r.URL.EscapedPath() + "\n" + r.URL.Query().Encode() + "\n")
	signed := fields["SignedHeaders"]
	for _, name := range strings.Split(signed, ";") {
		var values []string
		if name == "host" {
			values = []string{r.Host}
		} else {
			values = r.Header.Values(name)
		}
		for i, v := range values {
			values[i] = strings.Join(strings.Fields(v), " ")
		}
		canon.WriteString(name + ":" + strings.Join(values, ",") + "\n")
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" {
		payload = hexSHA256(body)
	}
	canon.WriteString("\n" + signed + "\n" + payload)
	toSign := algorithm + "\n" + amzDate + "\n" + strings.Join(scope[1:], "/") + "\n" + hexSHA256([]byte(canon.String()))
	k := hmacSHA256([]byte("AWS4"+s.cfg.SecretAccessKey), date)
	for _, part := range []string{region, service, "aws4_request"} {
		k = hmacSHA256(k, part)
	}
	want := hex.EncodeToString(hmacSHA256(k, toSign))
	if !hmac.Equal([]byte(want), []byte(fields["Signature"])) {
		return clientError("InvalidSignatureException", "The request signature we calculated does not match the signature you provided.")
	}
	return nil
}

func hexSHA256(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// registryID checks an optional registryId: only the served account has a registry here.
func (s *Server) registryID(in map[string]any) (string, error) {
	id, _ := in["registryId"].(string)
	if id != "" && id != s.cfg.Account {
		return "", clientError("AccessDeniedException", "registry %s is not served here (only %s)", id, s.cfg.Account)
	}
	return s.cfg.Account, nil
}

func (s *Server) registryHost() string {
	u, err := url.Parse(s.cfg.Registry)
	if err != nil {
		return s.cfg.Registry
	}
	return u.Host
}

func (s *Server) describeRepositories(in map[string]any) (any, error) {
	id, err := s.registryID(in)
	if err != nil {
		return nil, err
	}
	names := s.order
	if asked, ok := in["repositoryNames"].([]any); ok && len(asked) > 0 {
		names = nil
		for _, n := range asked {
			name, _ := n.(string)
			if s.repos[name] == nil {
				return nil, clientError("RepositoryNotFoundException",
					"The repository with name '%s' does not exist in the registry with id '%s'", name, id)
			}
			names = append(names, name)
		}
	}
	repos := []*Repository{}
	for _, n := range names {
		repos = append(repos, s.repos[n])
	}
	return map[string]any{"repositories": repos}, nil
}

func (s *Server) createRepository(in map[string]any) (any, error) {
	id, err := s.registryID(in)
	if err != nil {
		return nil, err
	}
	name, _ := in["repositoryName"].(string)
	if len(name) < 2 || len(name) > 256 || !repositoryName.MatchString(name) {
		return nil, clientError("InvalidParameterException", "Invalid parameter at 'repositoryName' failed to satisfy constraint: %q", name)
	}
	if s.repos[name] != nil {
		return nil, clientError("RepositoryAlreadyExistsException",
			"The repository with name '%s' already exists in the registry with id '%s'", name, id)
	}
	mutability, _ := in["imageTagMutability"].(string)
	switch mutability {
	case "":
		mutability = "MUTABLE"
	case "MUTABLE", "IMMUTABLE":
	default:
		return nil, clientError("InvalidParameterException", "imageTagMutability %q is not MUTABLE or IMMUTABLE", mutability)
	}
	scan, _ := in["imageScanningConfiguration"].(map[string]any)
	scanOnPush, _ := scan["scanOnPush"].(bool)
	enc, _ := in["encryptionConfiguration"].(map[string]any)
	encType, _ := enc["encryptionType"].(string)
	switch encType {
	case "":
		encType = "AES256"
	case "AES256", "KMS", "KMS_DSSE":
	default:
		return nil, clientError("InvalidParameterException", "encryptionType %q is not AES256, KMS or KMS_DSSE", encType)
	}
	repo := &Repository{
		RepositoryArn:              fmt.Sprintf("arn:aws:ecr:%s:%s:repository/%s", s.cfg.Region, id, name),
		RegistryID:                 id,
		RepositoryName:             name,
		RepositoryURI:              s.registryHost() + "/" + name,
		CreatedAt:                  float64(s.cfg.Now().Unix()),
		ImageTagMutability:         mutability,
		ImageScanningConfiguration: map[string]any{"scanOnPush": scanOnPush},
		EncryptionConfiguration:    map[string]any{"encryptionType": encType},
	}
	s.repos[name] = repo
	s.order = append(s.order, name)
	if err := s.writeState(); err != nil {
		return nil, err
	}
	return map[string]any{"repository": repo}, nil
}

func (s *Server) getAuthorizationToken(in map[string]any) (any, error) {
	ids := []any{s.cfg.Account}
	if asked, ok := in["registryIds"].([]any); ok && len(asked) > 0 {
		ids = asked
	}
	token := base64.StdEncoding.EncodeToString([]byte("AWS:" + s.cfg.Password))
	var data []map[string]any
	for _, id := range ids {
		if id != s.cfg.Account {
			return nil, clientError("AccessDeniedException", "registry %v is not served here (only %s)", id, s.cfg.Account)
		}
		data = append(data, map[string]any{
			"authorizationToken": token,
			"expiresAt":          float64(s.cfg.Now().Add(12 * time.Hour).Unix()),
			"proxyEndpoint":      s.cfg.Registry,
		})
	}
	return map[string]any{"authorizationData": data}, nil
}

// manifestTypes are the media types BatchGetImage accepts by default.
var manifestTypes = []string{
	"application/vnd.oci.image.index.v1+json",
	"application/vnd.docker.distribution.manifest.list.v2+json",
	"application/vnd.oci.image.manifest.v1+json",
	"application/vnd.docker.distribution.manifest.v2+json",
}

func (s *Server) batchGetImage(ctx context.Context, in map[string]any) (any, error) {
	id, err := s.registryID(in)
	if err != nil {
		return nil, err
	}
	name, _ := in["repositoryName"].(string)
	if s.repos[name] == nil {
		return nil, clientError("RepositoryNotFoundException",
			"The repository with name '%s' does not exist in the registry with id '%s'", name, id)
	}
	ids, _ := in["imageIds"].([]any)
	if len(ids) == 0 {
		return nil, clientError("InvalidParameterException", "imageIds must name at least one image")
	}
	images, failures := []any{}, []any{}
	for _, raw := range ids {
		imageID, _ := raw.(map[string]any)
		ref, _ := imageID["imageTag"].(string)
		if digest, _ := imageID["imageDigest"].(string); digest != "" {
			ref = digest
		}
		if ref == "" {
			return nil, clientError("InvalidParameterException", "an imageId needs imageTag or imageDigest")
		}
		manifest, mediaType, digest, err := s.readManifest(ctx, name, ref)
		if errors.Is(err, errNotFound) {
			failures = append(failures, map[string]any{"imageId": imageID, "failureCode": "ImageNotFound", "failureReason": "Requested image not found"})
			continue
		}
		if err != nil {
			return nil, err
		}
		found := map[string]any{"imageDigest": digest}
		if tag, _ := imageID["imageTag"].(string); tag != "" {
			found["imageTag"] = tag
		}
		images = append(images, map[string]any{
			"registryId": id, "repositoryName": name, "imageId": found,
			"imageManifest": manifest, "imageManifestMediaType": mediaType,
		})
	}
	return map[string]any{"images": images, "failures": failures}, nil
}

var errNotFound = errors.New("manifest not found")

// readManifest reads NAME:REF's manifest from the registry, as user AWS.
func (s *Server) readManifest(ctx context.Context, name, ref string) (manifest, mediaType, digest string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(s.cfg.Registry, "/")+"/v2/"+name+"/manifests/"+ref, nil)
	if err != nil {
		return "", "", "", fmt.Errorf("manifest request for %s:%s: %w", name, ref, err)
	}
	req.SetBasicAuth("AWS", s.cfg.Password)
	req.Header.Set("Accept", strings.Join(manifestTypes, ", "))
	resp, err := s.cfg.RegistryClient.Do(req)
	if err != nil {
		return "", "", "", fmt.Errorf("reading %s:%s from the registry: %w", name, ref, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return "", "", "", fmt.Errorf("reading %s:%s from the registry: %w", name, ref, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return "", "", "", errNotFound
	case resp.StatusCode != http.StatusOK:
		return "", "", "", fmt.Errorf("reading %s:%s from the registry: %s: %s", name, ref, resp.Status, bytes.TrimSpace(b))
	}
	digest = resp.Header.Get("Docker-Content-Digest")
	if digest == "" {
		digest = "sha256:" + hexSHA256(b)
	}
	return string(b), resp.Header.Get("Content-Type"), digest, nil
}

// writeState rewrites StateFile with the repositories, atomically.
func (s *Server) writeState() error {
	if s.cfg.StateFile == "" {
		return nil
	}
	repos := make([]*Repository, 0, len(s.order))
	for _, n := range s.order {
		repos = append(repos, s.repos[n])
	}
	b, err := json.MarshalIndent(map[string]any{"repositories": repos}, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the state: %w", err)
	}
	tmp := s.cfg.StateFile + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the state: %w", err)
	}
	if err := os.Rename(tmp, s.cfg.StateFile); err != nil {
		return fmt.Errorf("writing the state: %w", err)
	}
	return nil
}

// registryClient trusts the system's CAs plus the PEM file caFile (if any).
func registryClient(caFile string) (*http.Client, error) {
	if caFile == "" {
		return http.DefaultClient, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading the registry CA: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", caFile)
	}
	return &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}, nil
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on (port 0: a free one)")
	addrFile := flag.String("addr-file", "", "write the address listened on (HOST:PORT) to this file once listening")
	region := flag.String("region", "us-east-1", "the region requests must be signed for")
	account := flag.String("account", "123456789012", "the registry ID (AWS account) served")
	keyID := flag.String("access-key-id", "", "the access key ID accepted (required)")
	secretFile := flag.String("secret-access-key-file", "", "file holding the secret access key accepted (required)")
	registry := flag.String("registry", "", "the registry's base URL, https://HOST:PORT (required)")
	registryCA := flag.String("registry-ca", "", "PEM file of the CA that signed the registry's certificate")
	passwordFile := flag.String("password-file", "", "file holding the registry password of user AWS (required)")
	calls := flag.String("calls", "", "append one JSON line per call to this file")
	state := flag.String("state", "", "rewrite the repositories to this JSON file after every change")
	flag.Parse()
	if *keyID == "" || *secretFile == "" || *registry == "" || *passwordFile == "" {
		return errors.New("-access-key-id, -secret-access-key-file, -registry and -password-file are required")
	}
	if u, err := url.Parse(*registry); err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("-registry %q is not https://HOST[:PORT] (ECR's proxyEndpoint form)", *registry)
	}
	secret, err := os.ReadFile(*secretFile)
	if err != nil {
		return fmt.Errorf("reading the secret access key: %w", err)
	}
	password, err := os.ReadFile(*passwordFile)
	if err != nil {
		return fmt.Errorf("reading the registry password: %w", err)
	}
	client, err := registryClient(*registryCA)
	if err != nil {
		return err
	}
	cfg := Config{
		Region: *region, Account: *account, AccessKeyID: *keyID,
		SecretAccessKey: strings.TrimSpace(string(secret)), Registry: *registry,
		Password: strings.TrimSpace(string(password)), RegistryClient: client, StateFile: *state,
	}
	if *calls != "" {
		f, err := os.OpenFile(*calls, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("opening the call log: %w", err)
		}
		defer f.Close()
		cfg.Calls = f
	}
	srv := NewServer(cfg)
	if err := srv.writeState(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", *listen, err)
	}
	if *addrFile != "" {
		tmp := *addrFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(ln.Addr().String()+"\n"), 0o644); err != nil {
			return fmt.Errorf("writing the address file: %w", err)
		}
		if err := os.Rename(tmp, *addrFile); err != nil {
			return fmt.Errorf("writing the address file: %w", err)
		}
	}
	log.Printf("ecrlocal: ECR API for account %s in %s on http://%s, registry %s", *account, *region, ln.Addr(), *registry)
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(shutdown)
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving: %w", err)
	}
	return nil
}

func main() {
	log.SetFlags(0)
	if err := run(); err != nil {
		log.Fatalf("ecrlocal: %v", err)
	}
}
