package imagearch

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

func TestArchitecturesOfIndex(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want []string
		err  string
	}{
		{`{"manifests":[{"platform":{"os":"linux","architecture":"arm64","variant":"v8"}},{"platform":{"os":"linux","architecture":"amd64"}},{"platform":{"os":"linux","architecture":"arm64"}}]}`, []string{"amd64", "arm64"}, ""},
		{`{"manifests":[{"platform":{"os":"windows","architecture":"amd64"}},{"platform":{"os":"unknown","architecture":"unknown"}},{}]}`, nil, "no linux platform"},
		{`{"manifests":[{"platform":{"os":"linux","architecture":"AMD64"}},{"platform":{"architecture":"s390x"}}]}`, []string{"s390x"}, ""},
		{`{"manifests":`, nil, "decode image index"},
	} {
		got, err := architecturesOfIndex([]byte(tc.raw))
		if !slices.Equal(got, tc.want) || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: got %v, %v; want %v, %q", tc.raw, got, err, tc.want, tc.err)
		}
	}
}

func TestArchitectureOfConfig(t *testing.T) {
	if got, err := architectureOfConfig([]byte(`{"os":"linux","architecture":"arm64"}`)); err != nil || !slices.Equal(got, []string{"arm64"}) {
		t.Errorf("got %v, %v", got, err)
	}
	for _, raw := range []string{`{"os":"windows","architecture":"amd64"}`, `{"os":"linux"}`, `{"architecture":"a/b"}`, `[]`} {
		if got, err := architectureOfConfig([]byte(raw)); err == nil {
			t.Errorf("%s: got %v, want an error", raw, got)
		}
	}
}

// FuzzArchitectures feeds arbitrary bytes to both decoders: no panic, and what they
// answer is a short sorted list of distinct values a kubernetes.io/arch label can hold;
// their errors stay short. The same bytes as a registry's answer: the body bound cuts
// them at its limit, and as an error answer they never reach a RegistryError.
func FuzzArchitectures(f *testing.F) {
	f.Add([]byte(`{"manifests":[{"platform":{"os":"linux","architecture":"arm64"}},{"platform":{"os":"linux","architecture":"amd64"}}]}`))
	f.Add([]byte(`{"os":"linux","architecture":"amd64","variant":"v2"}`))
	f.Add([]byte(`{"manifests":[{"platform":null},{"platform":{"os":"","architecture":"unknown"}}]}`))
	f.Add([]byte(`{"manifests":[{"platform":{"architecture":"\u0000"}}]}`))
	f.Add([]byte(`{"os":"` + strings.Repeat("w", 300) + `","architecture":"amd64"}`))
	f.Add([]byte("MANIFEST_UNKNOWN"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkBodyBound(t, raw)
		checkNoEcho(t, raw)
		for _, decode := range []func([]byte) ([]string, error){architecturesOfIndex, architectureOfConfig} {
			got, err := decode(raw)
			if err != nil {
				if got != nil {
					t.Fatalf("an error with an answer %v", got)
				}
				if len(err.Error()) > 256 {
					t.Fatalf("an error of %d bytes: %.300q", len(err.Error()), err)
				}
				continue
			}
			if len(got) == 0 || len(got) > maxArchitectures || !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
				t.Fatalf("answer %q: want 1..%d sorted distinct values", got, maxArchitectures)
			}
			for _, a := range got {
				if _, ok := architecture(a); !ok {
					t.Fatalf("answer %q holds %q, not an architecture", got, a)
				}
			}
		}
	})
}

// checkBodyBound reads raw through the guard's body bound at a few limits: it gives
// the first limit bytes, then errBodyTooLarge exactly when raw is longer.
func checkBodyBound(t *testing.T, raw []byte) {
	t.Helper()
	for _, limit := range []int{0, len(raw) / 2, len(raw), len(raw) + 1} {
		b := &boundedBody{rc: io.NopCloser(bytes.NewReader(raw)), left: int64(limit), err: errBodyTooLarge}
		got, err := io.ReadAll(b)
		over := len(raw) > limit
		if !bytes.Equal(got, raw[:min(limit, len(raw))]) || over != errors.Is(err, errBodyTooLarge) || (!over && err != nil) {
			t.Fatalf("limit %d of %d bytes: read %d, %v", limit, len(raw), len(got), err)
		}
		// An error answer is cut short silently.
		e := &boundedBody{rc: io.NopCloser(bytes.NewReader(raw)), left: int64(limit), err: io.EOF}
		if got, err := io.ReadAll(e); err != nil || len(got) != min(limit, len(raw)) {
			t.Fatalf("error body, limit %d of %d bytes: read %d, %v", limit, len(raw), len(got), err)
		}
	}
}

// checkNoEcho makes raw a registry's error answer (its code and message) and an
// unknown error: the RegistryError says neither, unless raw is a known code.
func checkNoEcho(t *testing.T, raw []byte) {
	t.Helper()
	s := string(raw)
	te := &transport.Error{StatusCode: 404, Errors: []transport.Diagnostic{{Code: transport.ErrorCode(s), Message: s}}}
	for _, err := range []error{te, errors.New(s), fmt.Errorf("read: %w", te)} {
		msg := registryError("registry.example", err).Error()
		if len(msg) > 128 || (len(s) > 3 && !knownCodes[transport.ErrorCode(s)] && strings.Contains(msg, s)) {
			t.Fatalf("%q carries the answer %.100q", msg, s)
		}
	}
}
