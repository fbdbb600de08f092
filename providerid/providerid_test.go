package providerid

import (
	"strings"
	"testing"
)

func TestInstanceID(t *testing.T) {
	for providerID, want := range map[string]string{
		"aws:///eu-west-1a/i-0123456789abcdef0": "i-0123456789abcdef0",
		"aws://eu-west-1a/i-0123456789abcdef0":  "i-0123456789abcdef0",
		"aws:///eu-west-1a/i-0abc/":             "i-0abc",
		"kwok://kwok-spot-abc-xyz-123":          "kwok-spot-abc-xyz-123",
		"aws:///eu-west-1a/":                    "",
		"aws:///eu-west-1a/vol-1":               "",
		"aws:///eu-west-1a/i-0abc?x":            "",
		"kwok://a/b":                            "",
		"gce://project/zone/name":               "",
		"":                                      "",
		"i-0abc":                                "",
	} {
		got, ok := InstanceID(providerID)
		if got != want || ok != (want != "") {
			t.Errorf("InstanceID(%q) = %q, %v; want %q", providerID, got, ok, want)
		}
	}
}

func TestValidInstance(t *testing.T) {
	for id, want := range map[string]bool{
		"i-0123456789abcdef0":    true,
		"kwok-spot-abc.xyz_123":  true,
		"":                       false,
		"i-0abc/":                false,
		"i-0abc def":             false,
		strings.Repeat("a", 128): true,
		strings.Repeat("a", 129): false,
	} {
		if got := ValidInstance(id); got != want {
			t.Errorf("ValidInstance(%q) = %v, want %v", id, got, want)
		}
	}
}
