package imagearch

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// maxArchitectures bounds what one image may claim: a real index lists a handful.
const maxArchitectures = 32

// index is the part of an OCI image index or Docker manifest list read here.
type index struct {
	Manifests []struct {
		Platform *struct {
			OS           string `json:"os"`
			Architecture string `json:"architecture"`
		} `json:"platform"`
	} `json:"manifests"`
}

// config is the part of an image config read here.
type config struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
}

// architecturesOfIndex returns the sorted, distinct architectures of an image index's
// (or manifest list's) linux entries. Entries without a platform, of another OS, or
// "unknown" (attestation manifests) are left out; an index with none is an error.
func architecturesOfIndex(raw []byte) ([]string, error) {
	var ix index
	if err := json.Unmarshal(raw, &ix); err != nil {
		return nil, fmt.Errorf("decode image index: %w", err)
	}
	var out []string
	for _, m := range ix.Manifests {
		if m.Platform == nil || !linux(m.Platform.OS) {
			continue
		}
		arch, ok := architecture(m.Platform.Architecture)
		if !ok || slices.Contains(out, arch) {
			continue
		}
		if len(out) == maxArchitectures {
			return nil, fmt.Errorf("image index lists more than %d architectures", maxArchitectures)
		}
		out = append(out, arch)
	}
	if len(out) == 0 {
		return nil, errors.New("image index lists no linux platform")
	}
	slices.Sort(out)
	return out, nil
}

// architectureOfConfig returns the architecture of a single image from its config.
func architectureOfConfig(raw []byte) ([]string, error) {
	var c config
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("decode image config: %w", err)
	}
	if !linux(c.OS) {
		return nil, fmt.Errorf("image config is for OS %q, not linux", short(c.OS))
	}
	arch, ok := architecture(c.Architecture)
	if !ok {
		return nil, fmt.Errorf("image config has no usable architecture (%q)", short(c.Architecture))
	}
	return []string{arch}, nil
}

// linux accepts the OS of a linux platform; an empty one is taken as linux, as
// container runtimes do.
func linux(os string) bool { return os == "" || os == "linux" }

// architecture checks a platform's architecture: a short lower-case token such as
// amd64 or arm64, as the kubernetes.io/arch label carries it. Anything else (empty,
// "unknown", a string a label value cannot hold) is not an architecture.
func architecture(a string) (string, bool) {
	if a == "" || a == "unknown" || len(a) > 32 {
		return "", false
	}
	for _, r := range a {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' && r != '-' {
			return "", false
		}
	}
	return a, true
}

// Intersect returns the architectures in both sorted lists.
func Intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// Describe renders architectures for messages: "amd64, arm64".
func Describe(arches []string) string {
	if len(arches) == 0 {
		return "none"
	}
	return strings.Join(arches, ", ")
}
