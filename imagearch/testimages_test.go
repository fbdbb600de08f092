package imagearch

import (
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// platformImage is a random single-layer image whose config says os/arch.
func platformImage(t testing.TB, arch string) v1.Image {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// multiArchIndex is an OCI index of one image per architecture, plus an attestation
// manifest of platform unknown/unknown as BuildKit adds.
func multiArchIndex(t testing.TB, arches ...string) v1.ImageIndex {
	t.Helper()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range append(arches, "unknown") {
		os := "linux"
		if arch == "unknown" {
			os = "unknown"
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        platformImage(t, arch),
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: os, Architecture: arch}},
		})
	}
	return idx
}

// pushImage writes img to ref (an HTTP registry) and returns its digest reference.
func pushImage(t testing.TB, ref string, img v1.Image, opts ...remote.Option) string {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, opts...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return r.Context().Name() + "@" + d.String()
}

// pushIndex writes idx to ref and returns its digest reference.
func pushIndex(t testing.TB, ref string, idx v1.ImageIndex, opts ...remote.Option) string {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(r, idx, opts...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return r.Context().Name() + "@" + d.String()
}
