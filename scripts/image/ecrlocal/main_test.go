package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

const (
	testRegion  = "us-east-1"
	testAccount = "123456789012"
	testKeyID   = "AKIDLOCAL"
	testSecret  = "local-secret"
	testPass    = "s3cret-registry-password"
)

// fakeRegistry answers manifest GETs of custom-kube-scheduler-webhook:1.0.0 only, and
// only to user AWS with testPass, as the local registry does.
func fakeRegistry(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "AWS" || p != testPass {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.URL.Path != "/v2/custom-kube-scheduler-webhook/manifests/1.0.0" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.oci.image.index.v1+json")
		w.Header().Set("Docker-Content-Digest", "sha256:abc")
		_, _ = w.Write([]byte(`{"schemaVersion":2}`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

type fixture struct {
	api   *httptest.Server
	calls *bytes.Buffer
	state string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	reg := fakeRegistry(t)
	f := &fixture{calls: &bytes.Buffer{}, state: filepath.Join(t.TempDir(), "state.json")}
	s := NewServer(Config{
		Region: testRegion, Account: testAccount, AccessKeyID: testKeyID, SecretAccessKey: testSecret,
		Registry: reg.URL, Password: testPass, RegistryClient: reg.Client(), Calls: f.calls, StateFile: f.state,
	})
	f.api = httptest.NewServer(s)
	t.Cleanup(f.api.Close)
	return f
}

// call sends one ECR call signed by the SDK's own SigV4 signer (an implementation
// independent of the server's check) for region and secret.
func (f *fixture) call(t *testing.T, op string, in any, region, secret string) (int, map[string]any) {
	t.Helper()
	body, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, f.api.URL+"/", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", jsonContentType)
	req.Header.Set("X-Amz-Target", targetPrefix+op)
	if secret != "" {
		creds := aws.Credentials{AccessKeyID: testKeyID, SecretAccessKey: secret}
		if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hexSHA256(body), "ecr", region, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != jsonContentType {
		t.Errorf("%s: answer content type %q, want %s", op, ct, jsonContentType)
	}
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s: answer: %v", op, err)
	}
	return resp.StatusCode, out
}

func (f *fixture) ok(t *testing.T, op string, in any) map[string]any {
	t.Helper()
	status, out := f.call(t, op, in, testRegion, testSecret)
	if status != http.StatusOK {
		t.Fatalf("%s: status %d, %v", op, status, out)
	}
	return out
}

func (f *fixture) fails(t *testing.T, op string, in any, region, secret, code string) {
	t.Helper()
	status, out := f.call(t, op, in, region, secret)
	if status != http.StatusBadRequest || out["__type"] != code {
		t.Errorf("%s: status %d %v, want 400 with __type %s", op, status, out, code)
	}
	if msg, _ := out["message"].(string); msg == "" {
		t.Errorf("%s: error without a message: %v", op, out)
	}
}

func TestRepositoryLifecycle(t *testing.T) {
	f := newFixture(t)
	names := map[string]any{"repositoryNames": []string{"custom-kube-scheduler-webhook"}}
	f.fails(t, "DescribeRepositories", names, testRegion, testSecret, "RepositoryNotFoundException")

	created := f.ok(t, "CreateRepository", map[string]any{
		"repositoryName":             "custom-kube-scheduler-webhook",
		"imageTagMutability":         "IMMUTABLE",
		"imageScanningConfiguration": map[string]any{"scanOnPush": true},
		"encryptionConfiguration":    map[string]any{"encryptionType": "AES256"},
	})
	repo, _ := created["repository"].(map[string]any)
	if repo["imageTagMutability"] != "IMMUTABLE" || repo["registryId"] != testAccount {
		t.Errorf("created %v", repo)
	}
	f.fails(t, "CreateRepository", map[string]any{"repositoryName": "custom-kube-scheduler-webhook"},
		testRegion, testSecret, "RepositoryAlreadyExistsException")
	f.fails(t, "CreateRepository", map[string]any{"repositoryName": "Bad Name"}, testRegion, testSecret, "InvalidParameterException")

	described := f.ok(t, "DescribeRepositories", names)
	repos, _ := described["repositories"].([]any)
	if len(repos) != 1 {
		t.Fatalf("described %v", described)
	}
	got, _ := repos[0].(map[string]any)
	if got["imageTagMutability"] != "IMMUTABLE" ||
		got["imageScanningConfiguration"].(map[string]any)["scanOnPush"] != true ||
		got["encryptionConfiguration"].(map[string]any)["encryptionType"] != "AES256" {
		t.Errorf("settings not recorded: %v", got)
	}
	if uri, _ := got["repositoryUri"].(string); !strings.HasPrefix(uri, "127.0.0.1:") || !strings.HasSuffix(uri, "/custom-kube-scheduler-webhook") {
		t.Errorf("repositoryUri %q, want the registry's host and the name", uri)
	}

	// The state file a test reads says the same.
	b, err := os.ReadFile(f.state)
	if err != nil {
		t.Fatal(err)
	}
	var state struct{ Repositories []Repository }
	if err := json.Unmarshal(b, &state); err != nil {
		t.Fatal(err)
	}
	if len(state.Repositories) != 1 || state.Repositories[0].ImageTagMutability != "IMMUTABLE" ||
		state.Repositories[0].ImageScanningConfiguration["scanOnPush"] != true ||
		state.Repositories[0].EncryptionConfiguration["encryptionType"] != "AES256" {
		t.Errorf("state file %s", b)
	}
}

func TestAuthorizationToken(t *testing.T) {
	f := newFixture(t)
	out := f.ok(t, "GetAuthorizationToken", map[string]any{"registryIds": []string{testAccount}})
	data, _ := out["authorizationData"].([]any)
	if len(data) != 1 {
		t.Fatalf("authorizationData %v", out)
	}
	d, _ := data[0].(map[string]any)
	token, err := base64.StdEncoding.DecodeString(d["authorizationToken"].(string))
	if err != nil || string(token) != "AWS:"+testPass {
		t.Errorf("token decodes to %q (%v), want AWS:<password>", token, err)
	}
	if pe, _ := d["proxyEndpoint"].(string); !strings.HasPrefix(pe, "https://127.0.0.1:") {
		t.Errorf("proxyEndpoint %q, want the local registry", pe)
	}
	if _, ok := d["expiresAt"].(float64); !ok {
		t.Errorf("expiresAt %v, want epoch seconds", d["expiresAt"])
	}
	f.ok(t, "GetAuthorizationToken", map[string]any{})
	f.fails(t, "GetAuthorizationToken", map[string]any{"registryIds": []string{"210987654321"}}, testRegion, testSecret, "AccessDeniedException")
}

func TestBatchGetImageReadsTheRegistry(t *testing.T) {
	f := newFixture(t)
	f.ok(t, "CreateRepository", map[string]any{"repositoryName": "custom-kube-scheduler-webhook"})
	out := f.ok(t, "BatchGetImage", map[string]any{
		"repositoryName": "custom-kube-scheduler-webhook",
		"imageIds":       []any{map[string]any{"imageTag": "1.0.0"}, map[string]any{"imageTag": "2.0.0"}},
	})
	images, _ := out["images"].([]any)
	failures, _ := out["failures"].([]any)
	if len(images) != 1 || len(failures) != 1 {
		t.Fatalf("images %v failures %v, want 1.0.0 found and 2.0.0 not", images, failures)
	}
	img, _ := images[0].(map[string]any)
	if id, _ := img["imageId"].(map[string]any); id["imageTag"] != "1.0.0" || id["imageDigest"] != "sha256:abc" {
		t.Errorf("image %v", img)
	}
	if fl, _ := failures[0].(map[string]any); fl["failureCode"] != "ImageNotFound" {
		t.Errorf("failure %v", fl)
	}
	f.fails(t, "BatchGetImage", map[string]any{"repositoryName": "other", "imageIds": []any{map[string]any{"imageTag": "1"}}},
		testRegion, testSecret, "RepositoryNotFoundException")
}

func TestRefusals(t *testing.T) {
	f := newFixture(t)
	f.fails(t, "DeleteRepository", map[string]any{"repositoryName": "x"}, testRegion, testSecret, "UnknownOperationException")
	f.fails(t, "DescribeRepositories", map[string]any{}, "eu-west-1", testSecret, "InvalidSignatureException")
	f.fails(t, "DescribeRepositories", map[string]any{}, testRegion, "wrong-secret", "InvalidSignatureException")
	f.fails(t, "DescribeRepositories", map[string]any{}, testRegion, "", "MissingAuthenticationTokenException")
	f.fails(t, "CreateRepository", map[string]any{"repositoryName": "abc", "registryId": "210987654321"}, testRegion, testSecret, "AccessDeniedException")

	// Not the JSON 1.1 protocol.
	resp, err := http.Post(f.api.URL+"/", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a request without X-Amz-Target: status %d, want 400", resp.StatusCode)
	}

	// Every call is in the log, refused ones too, with its operation and error code.
	var ops, codes []string
	for _, line := range strings.Split(strings.TrimSpace(f.calls.String()), "\n") {
		var c Call
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("call log line %q: %v", line, err)
		}
		ops, codes = append(ops, c.Op), append(codes, c.Error)
	}
	wantOps := "DeleteRepository DescribeRepositories DescribeRepositories DescribeRepositories CreateRepository "
	if got := strings.Join(ops, " "); got != wantOps {
		t.Errorf("logged ops %q, want %q", got, wantOps)
	}
	wantCodes := "UnknownOperationException InvalidSignatureException InvalidSignatureException MissingAuthenticationTokenException AccessDeniedException UnknownOperationException"
	if got := strings.Join(codes, " "); got != wantCodes {
		t.Errorf("logged errors %q, want %q", got, wantCodes)
	}
}
