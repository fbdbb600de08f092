package main

import (
	"strings"
	"testing"
)

// Other replicas reach this one at its pod IP in a cluster, at the listen address
// outside one, or where PEER_ADDRESS says.
func TestPeerAddress(t *testing.T) {
	cases := []struct{ setting, listen, podIP, want string }{
		{"", ":8443", "10.1.2.3", "https://10.1.2.3:8443"},
		{"", "0.0.0.0:8443", "fd00::7", "https://[fd00::7]:8443"},
		{"", ":9443", "", "https://127.0.0.1:9443"},
		{"", "[::]:9443", "", "https://127.0.0.1:9443"},
		{"", "192.168.5.1:9443", "", "https://192.168.5.1:9443"},
		{"https://webhook-0.peers:8443/", ":8443", "10.1.2.3", "https://webhook-0.peers:8443"},
	}
	for _, c := range cases {
		got, err := peerAddress(c.setting, c.listen, c.podIP, c.podIP != "")
		if err != nil || got != c.want {
			t.Errorf("peerAddress(%q, %q, %q) = %q, %v; want %q", c.setting, c.listen, c.podIP, got, err, c.want)
		}
	}
	for _, bad := range []struct{ setting, listen string }{
		{"http://10.1.2.3:8443", ":8443"}, // claims travel over TLS only
		{"https://", ":8443"},
		{"https://10.1.2.3:8443/claims", ":8443"},
		{"", "8443"},
	} {
		if _, err := peerAddress(bad.setting, bad.listen, "", false); err == nil || !strings.Contains(err.Error(), "want") {
			t.Errorf("peerAddress(%q, %q): %v; want a clear error", bad.setting, bad.listen, err)
		}
	}
	// In a pod without POD_IP, loopback would route the others' claims to themselves.
	if _, err := peerAddress("", ":8443", "", true); err == nil || !strings.Contains(err.Error(), "POD_IP") {
		t.Errorf("in a pod without POD_IP: %v; want an error naming POD_IP", err)
	}
	if got, err := peerAddress("https://10.9.9.9:8443", ":8443", "", true); err != nil || got != "https://10.9.9.9:8443" {
		t.Errorf("in a pod with PEER_ADDRESS: %q, %v", got, err)
	}
}
