package selfcert

import (
	"context"
	"testing"
)

// With certificate files provided Await does nothing.
func TestSettingsAwait(t *testing.T) {
	if err := (Settings{CertFile: "/a/tls.crt", KeyFile: "/b/tls.key"}).Await(context.Background(), "ns", nil, nil); err != nil {
		t.Fatalf("CERT_MODE=file: %v", err)
	}
}
