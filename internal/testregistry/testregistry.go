// Package testregistry gives tests container images built offline (random layers,
// the platform set in their config or index) and Debian's docker-registry to push them
// to, run on a free loopback port and stopped when the test ends, as
// scripts/image/lib.sh runs it. It is for tests only and imports nothing of the product.
package testregistry

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// PlatformImage is a random single-layer image whose config says linux/arch.
func PlatformImage(t testing.TB, arch string) v1.Image {
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

// MultiArchIndex is an OCI index of one image per architecture, plus an attestation
// manifest of platform unknown/unknown as BuildKit adds one.
func MultiArchIndex(t testing.TB, arches ...string) v1.ImageIndex {
	t.Helper()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range append(slices.Clone(arches), "unknown") {
		os := "linux"
		if arch == "unknown" {
			os = "unknown"
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        PlatformImage(t, arch),
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: os, Architecture: arch}},
		})
	}
	return idx
}

// PushImage writes img to ref and returns its digest reference. A loopback registry
// is tried over HTTPS, then HTTP.
func PushImage(t testing.TB, ref string, img v1.Image, opts ...remote.Option) string {
	t.Helper()
	r := parse(t, ref)
	if err := remote.Write(r, img, opts...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return r.Context().Name() + "@" + d.String()
}

// PushIndex writes idx to ref and returns its digest reference.
func PushIndex(t testing.TB, ref string, idx v1.ImageIndex, opts ...remote.Option) string {
	t.Helper()
	r := parse(t, ref)
	if err := remote.WriteIndex(r, idx, opts...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return r.Context().Name() + "@" + d.String()
}

func parse(t testing.TB, ref string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// FreePort returns a loopback port nothing listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Process is a subprocess of a test, stopped when the test ends (or by Stop).
type Process struct {
	cmd  *exec.Cmd
	log  *os.File
	once sync.Once
}

// StartProcess runs cmd, its output in logFile, until the test ends.
func StartProcess(t testing.TB, cmd *exec.Cmd, logFile string) *Process {
	t.Helper()
	out, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	p := &Process{cmd: cmd, log: out}
	t.Cleanup(p.Stop)
	return p
}

// Stop ends the process (SIGTERM, then SIGKILL after 10 s); later calls do nothing.
func (p *Process) Stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
		_ = p.log.Close()
	})
}

// Registry is a docker-registry process.
type Registry struct {
	// Host is its host:port on 127.0.0.1.
	Host string
	*Process
}

// Options of Start: an htpasswd file (only its users may pull and push), a serving
// certificate and key (PEM files: HTTPS instead of HTTP).
type Options struct {
	Htpasswd  string
	Cert, Key string
}

// Start runs Debian's docker-registry on a free loopback port and returns once it
// answers.
func Start(t testing.TB, o Options) *Registry {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		t.Fatalf("Debian's docker-registry is needed (apt-get install docker-registry): %v", err)
	}
	dir := t.TempDir()
	host := fmt.Sprintf("127.0.0.1:%d", FreePort(t))
	cfg := fmt.Sprintf("version: 0.1\nlog: {level: warn}\nstorage:\n  filesystem: {rootdirectory: %s}\nhttp:\n  addr: %s\n  secret: test-secret\n", dir, host)
	scheme := "http"
	if o.Cert != "" {
		cfg += fmt.Sprintf("  tls: {certificate: %s, key: %s}\n", o.Cert, o.Key)
		scheme = "https"
	}
	if o.Htpasswd != "" {
		cfg += fmt.Sprintf("auth:\n  htpasswd: {realm: registry, path: %s}\n", o.Htpasswd)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", filepath.Join(dir, "config.yml"))
	// The registry reads REGISTRY_* variables as configuration.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "REGISTRY_") })
	logFile := filepath.Join(dir, "registry.log")
	p := StartProcess(t, cmd, logFile)
	// Readiness only: /v2/ answers (200, or 401 behind htpasswd) once it listens.
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a readiness probe on loopback
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := client.Get(scheme + "://" + host + "/v2/")
		if err == nil {
			resp.Body.Close()
			return &Registry{Host: host, Process: p}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile)
			t.Fatalf("docker-registry on %s did not answer: %v\n%s", host, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Htpasswd writes a bcrypt htpasswd file of one user (docker-registry takes bcrypt
// only) with Debian's htpasswd.
func Htpasswd(t testing.TB, user, pass string) string {
	t.Helper()
	out, err := exec.Command("htpasswd", "-Bbn", user, pass).Output()
	if err != nil {
		t.Fatalf("htpasswd (apt-get install apache2-utils): %v", err)
	}
	path := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// HugeIndex is a valid OCI image index of about size bytes (amd64 entries repeated):
// what a hostile registry answers to exhaust a reader's memory.
func HugeIndex(size int) []byte {
	var b strings.Builder
	b.WriteString(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[`)
	entry := `{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:` + strings.Repeat("a", 64) + `","size":1,"platform":{"os":"linux","architecture":"amd64"}}`
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(entry)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}
