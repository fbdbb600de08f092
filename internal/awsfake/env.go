package awsfake

import (
	"net/http/httptest"
	"path/filepath"
	"testing"
)

// StartForTest serves p on a loopback test server, stopped when the test ends, and
// points the AWS SDK's default chain at it (SetTestEnv).
func StartForTest(t testing.TB, p Prices) *Server {
	t.Helper()
	fake := New(p)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	SetTestEnv(t, srv.URL)
	return fake
}

// SetTestEnv points the AWS SDK's default chain at test credentials, region eu-west-1
// and endpoint for the Price List API and EC2, with no shared config, no instance
// metadata and no retries, and TMPDIR at a test directory: code that builds its clients
// from the environment (pricing.NewAWS) then asks this package's Server through the
// real aws-sdk-go-v2 clients. The settings last until the test ends.
func SetTestEnv(t testing.TB, endpoint string) {
	t.Helper()
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "secret", "AWS_SESSION_TOKEN": "", "AWS_REGION": "eu-west-1",
		"AWS_PROFILE": "", "AWS_CONFIG_FILE": filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_ENDPOINT_URL": "", "AWS_ENDPOINT_URL_PRICING": endpoint, "AWS_ENDPOINT_URL_EC2": endpoint,
		"AWS_MAX_ATTEMPTS": "1", "TMPDIR": dir,
	} {
		t.Setenv(k, v)
	}
}

// StartSQSForTest serves a local SQS endpoint of account 000000000000 on a loopback test
// server, stopped when the test ends, and points the AWS SDK's default chain at it
// (SetTestEnv, and AWS_ENDPOINT_URL_SQS).
func StartSQSForTest(t testing.TB) *SQS {
	t.Helper()
	fake := NewSQS("000000000000")
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	fake.URL = srv.URL
	SetTestEnv(t, srv.URL)
	t.Setenv("AWS_ENDPOINT_URL_SQS", srv.URL)
	return fake
}
