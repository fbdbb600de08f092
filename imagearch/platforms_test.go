package imagearch

import (
	"slices"
	"strings"
	"testing"
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
		got, err := ArchitecturesOfIndex([]byte(tc.raw))
		if !slices.Equal(got, tc.want) || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: got %v, %v; want %v, %q", tc.raw, got, err, tc.want, tc.err)
		}
	}
}

func TestArchitectureOfConfig(t *testing.T) {
	if got, err := ArchitectureOfConfig([]byte(`{"os":"linux","architecture":"arm64"}`)); err != nil || !slices.Equal(got, []string{"arm64"}) {
		t.Errorf("got %v, %v", got, err)
	}
	for _, raw := range []string{`{"os":"windows","architecture":"amd64"}`, `{"os":"linux"}`, `{"architecture":"a/b"}`, `[]`} {
		if got, err := ArchitectureOfConfig([]byte(raw)); err == nil {
			t.Errorf("%s: got %v, want an error", raw, got)
		}
	}
}

// FuzzArchitectures feeds arbitrary bytes to both decoders: no panic, and what they
// answer is a short sorted list of distinct values a kubernetes.io/arch label can hold.
func FuzzArchitectures(f *testing.F) {
	f.Add([]byte(`{"manifests":[{"platform":{"os":"linux","architecture":"arm64"}},{"platform":{"os":"linux","architecture":"amd64"}}]}`))
	f.Add([]byte(`{"os":"linux","architecture":"amd64","variant":"v2"}`))
	f.Add([]byte(`{"manifests":[{"platform":null},{"platform":{"os":"","architecture":"unknown"}}]}`))
	f.Add([]byte(`{"manifests":[{"platform":{"architecture":"\u0000"}}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, decode := range []func([]byte) ([]string, error){ArchitecturesOfIndex, ArchitectureOfConfig} {
			got, err := decode(raw)
			if err != nil {
				if got != nil {
					t.Fatalf("an error with an answer %v", got)
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
