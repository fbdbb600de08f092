package selfcert

import (
	"context"
	"strings"
	"testing"
)

// With certificate files provided Await does nothing; the self-managed mode writes the
// certificate and the key into one directory, and says so when they name two.
func TestSettingsAwait(t *testing.T) {
	ctx := context.Background()
	if err := (Settings{CertFile: "/a/tls.crt", KeyFile: "/b/tls.key"}).Await(ctx, "ns", nil, nil); err != nil {
		t.Fatalf("CERT_MODE=file: %v", err)
	}
	err := (Settings{Self: true, CertFile: "/a/tls.crt", KeyFile: "/b/tls.key"}).Await(ctx, "ns", nil, nil)
	if err == nil || !strings.Contains(err.Error(), "TLS_CERT_FILE and TLS_KEY_FILE must share it") {
		t.Fatalf("CERT_MODE=self with two directories: %v", err)
	}
}
