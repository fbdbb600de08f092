//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/testregistry"
)

// hostileMarker is in every body the hostile registry sends: no warning may carry it.
const hostileMarker = "HOSTILE-REGISTRY-BODY"

// The hostile registry's repositories: what each answers to a manifest read.
var hostileKinds = map[string]string{
	"huge404":     "a 404 of 32 MiB",
	"endless404":  "a 404 that never ends",
	"endless":     "an image index that never ends (no Content-Length)",
	"huge":        "a valid 48 MiB image index with its Content-Length",
	"hugechunked": "the same index without a Content-Length",
	"tarpit":      "nothing, until the test ends",
}

// hostileServer is a registry a tenant could name: plain HTTP on loopback only,
// answering manifest reads with harm (hostileKinds), stopped when the test ends.
type hostileServer struct {
	host string
	hits map[string]*atomic.Int64 // manifest reads per repository
	held atomic.Int64             // tarpit reads being held now
}

func startHostileRegistry(t *testing.T) *hostileServer {
	t.Helper()
	h := &hostileServer{hits: map[string]*atomic.Int64{}}
	for k := range hostileKinds {
		h.hits[k] = new(atomic.Int64)
	}
	stop := make(chan struct{})
	chunk := bytes.Repeat([]byte(`{"message":"`+hostileMarker+`"}`), 2048)
	index := testregistry.HugeIndex(48 << 20)
	// write sends chunk until n bytes are out (n < 0: for ever), the client goes or the
	// test ends.
	write := func(w http.ResponseWriter, n int) {
		for sent := 0; n < 0 || sent < n; sent += len(chunk) {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/v2/" {
			return
		}
		repo, _, ok := strings.Cut(strings.TrimPrefix(req.URL.Path, "/v2/"), "/manifests/")
		hits := h.hits[repo]
		if !ok || hits == nil {
			http.NotFound(w, req)
			return
		}
		hits.Add(1)
		switch repo {
		case "huge404":
			w.WriteHeader(http.StatusNotFound)
			write(w, 32<<20)
		case "endless404":
			w.WriteHeader(http.StatusNotFound)
			write(w, -1)
		case "endless":
			w.Header().Set("Content-Type", "application/vnd.oci.image.index.v1+json")
			write(w, -1)
		case "huge", "hugechunked":
			w.Header().Set("Content-Type", "application/vnd.oci.image.index.v1+json")
			if repo == "huge" {
				w.Header().Set("Content-Length", strconv.Itoa(len(index)))
			}
			_, _ = w.Write(index)
		case "tarpit":
			h.held.Add(1)
			defer h.held.Add(-1)
			select {
			case <-stop:
			case <-req.Context().Done():
			}
		}
	}))
	if !strings.HasPrefix(srv.Listener.Addr().String(), "127.0.0.1:") {
		srv.Close()
		t.Fatalf("the hostile registry listens on %s, want loopback", srv.Listener.Addr())
	}
	// Held and endless answers end first: Close waits for every request in flight.
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) })
	h.host = srv.Listener.Addr().String()
	return h
}

// chartMemory is the chart's resources.limits.memory and gcPercent (deploy/chart values).
func chartMemory(t *testing.T) (limit int64, gcPercent int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(env.repo, "deploy", "chart", "custom-kube-scheduler-webhook", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Resources struct {
			Limits map[string]string `json:"limits"`
		} `json:"resources"`
		GCPercent int `json:"gcPercent"`
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("reading the chart's values: %v", err)
	}
	q, err := resource.ParseQuantity(v.Resources.Limits["memory"])
	if err != nil {
		t.Fatalf("the chart's resources.limits.memory %q: %v", v.Resources.Limits["memory"], err)
	}
	return q.Value(), v.GCPercent
}

// peakRSS is the process's peak resident set (VmHWM of /proc/<pid>/status) in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fs := strings.Fields(s.Text()); len(fs) == 3 && fs[0] == "VmHWM:" && fs[2] == "kB" {
			kb, err := strconv.ParseInt(fs[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// probe is one server-side dry-run create of a pod of rs with image, and what came back.
type probe struct {
	image    string
	pod      *corev1.Pod
	err      error
	warnings []string
}

// dryRunPods creates, all at once and by server-side dry-run, one pod of rs per image
// (as the ReplicaSet would, through a client of its own so each pod's warnings are its
// own), and returns what the API server answered.
func dryRunPods(ctx context.Context, t *testing.T, rs *appsv1.ReplicaSet, images []string) []*probe {
	t.Helper()
	out := make([]*probe, len(images))
	var wg sync.WaitGroup
	for i, image := range images {
		pr := &probe{image: image}
		out[i] = pr
		cfg := rest.CopyConfig(env.hc.Config)
		cfg.QPS, cfg.Burst = -1, 0
		warned := &warnings{}
		cfg.WarningHandler = warned
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				GenerateName: rs.Name + "-", Labels: rs.Spec.Template.Labels, Annotations: rs.Spec.Template.Annotations,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr(true)}},
			},
			Spec: *rs.Spec.Template.Spec.DeepCopy(),
		}
		pod.Spec.Containers[0].Image = image
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr.pod, pr.err = client.CoreV1().Pods(rs.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			warned.mu.Lock()
			pr.warnings = slices.Clone(warned.text)
			warned.mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// maxWarningBytes bounds a warning about a registry: its name, a status, a reason.
const maxWarningBytes = 512

// checkHostileProbe checks that a pod naming the hostile registry was admitted
// without an architecture requirement, with one bounded warning that echoes nothing.
func checkHostileProbe(t *testing.T, pr *probe) {
	t.Helper()
	if pr.err != nil {
		t.Errorf("dry-run of a pod of %s: %v", pr.image, pr.err)
		return
	}
	if got := archRequirement(*pr.pod); got != nil {
		t.Errorf("pod of %s: arch requirement %v, want none", pr.image, got)
	}
	var arch []string
	for _, w := range pr.warnings {
		if len(w) > maxWarningBytes || strings.Contains(w, hostileMarker) || strings.Contains(w, "aaaaaaaa") {
			t.Errorf("pod of %s: a warning of %d bytes echoes the registry: %.300q", pr.image, len(w), w)
		}
		if strings.Contains(w, "kubernetes.io/arch requirement") {
			arch = append(arch, w)
		}
	}
	if len(arch) != 1 {
		t.Errorf("pod of %s: %d warnings about its architectures, want 1: %q", pr.image, len(arch), pr.warnings)
	}
}

// A registry a tenant names harms no one. One namespace's pods name a hostile registry
// on loopback (listed as insecure, so the webhook reads it: the worst case) answering
// huge and endless error bodies, huge and endless indexes, and a tarpit; another
// namespace's pods name a healthy registry's multi-arch index (arm64 and s390x, on
// capacity offering amd64 and arm64). The webhook runs with the chart's memory settings.
// The hostile pods are admitted and placed without an architecture requirement, each
// with one short warning that echoes nothing the registry sent; the other namespace's
// pods, created while the tarpit holds the hostile registry's lookup slots, still get
// their requirement (arm64); and the webhook's peak RSS stays under the chart's memory
// limit.
func TestHostileRegistryHarmsNoOne(t *testing.T) {
	ctx := context.Background()
	limit, gcPercent := chartMemory(t)
	reg := testregistry.Start(t, testregistry.Options{})
	healthyImage := reg.Host + "/e2e/arm:1"
	testregistry.PushIndex(t, healthyImage, testregistry.MultiArchIndex(t, "arm64", "s390x"))
	hostile := startHostileRegistry(t)
	applyNodePool(ctx, t, archPool)
	hostileNS := newNamespace(ctx, t, "e2e-hostile-registry")
	healthyNS := newNamespace(ctx, t, "e2e-healthy-registry")
	waitServed(ctx, t, hostileNS, archOpen)
	p := archWebhook(ctx, t, reg.Host+","+hostile.host,
		fmt.Sprintf("GOGC=%d", gcPercent), fmt.Sprintf("GOMEMLIMIT=%d", limit*3/4))
	start, ready := time.Now(), peakRSS(t, p.PID())

	// Every hostile repository, each under several tags at once: as many lookups as
	// the registry's slots and queue take.
	d := archDeployment(hostileNS, "hostile", archOpen, hostile.host+"/huge404:0", 1)
	createDeployment(ctx, t, d)
	rs := replicaSetOf(ctx, t, hostileNS, d)
	var images []string
	for kind := range hostileKinds {
		if kind == "tarpit" {
			continue
		}
		for i := range 6 {
			images = append(images, fmt.Sprintf("%s/%s:%d", hostile.host, kind, i))
		}
	}
	logged := map[string]bool{}
	for _, pr := range dryRunPods(ctx, t, rs, images) {
		checkHostileProbe(t, pr)
		if kind, _, _ := strings.Cut(strings.TrimPrefix(pr.image, hostile.host+"/"), ":"); !logged[kind] && len(pr.warnings) > 0 {
			logged[kind] = true
			t.Logf("%s: %q", kind, pr.warnings)
		}
	}

	// The tarpit holds the hostile registry's lookups; meanwhile pods of both
	// namespaces are created.
	tarpit := dryRunPods(ctx, t, rs, []string{hostile.host + "/tarpit:0", hostile.host + "/tarpit:1", hostile.host + "/tarpit:2", hostile.host + "/tarpit:3"})
	for _, pr := range tarpit {
		checkHostileProbe(t, pr)
	}
	if n := hostile.held.Load(); n == 0 {
		t.Errorf("the tarpit holds no lookup after its pods were admitted")
	}
	var hostileDeps []string
	for kind := range hostileKinds {
		name := "hostile-" + kind
		createDeployment(ctx, t, archDeployment(hostileNS, name, archOpen, hostile.host+"/"+kind+":pods", 2))
		hostileDeps = append(hostileDeps, name)
	}
	createDeployment(ctx, t, archDeployment(healthyNS, "healthy", archOpen, healthyImage, 4))
	for _, pod := range seatedPods(ctx, t, healthyNS, "healthy", 4) {
		if got := archRequirement(pod); !slices.Equal(got, []string{"arm64"}) {
			t.Errorf("pod %s of the healthy registry's image: arch requirement %v, want [arm64]", pod.Name, got)
		}
	}
	for _, name := range hostileDeps {
		for _, pod := range seatedPods(ctx, t, hostileNS, name, 2) {
			if got := archRequirement(pod); got != nil {
				t.Errorf("pod %s of the hostile registry: arch requirement %v, want none", pod.Name, got)
			}
		}
	}
	for kind, what := range hostileKinds {
		if hostile.hits[kind].Load() == 0 {
			t.Errorf("the hostile registry's %s (%s) was never read", kind, what)
		}
	}

	// Peak RSS of the whole run, after the last lookups have ended (10 s at most).
	_ = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		return hostile.held.Load() == 0, nil
	})
	hwm := peakRSS(t, p.PID())
	t.Logf("webhook peak RSS (VmHWM) %d MiB (%d MiB when ready), the chart's limit %d MiB; %s after the webhook was ready", hwm>>20, ready>>20, limit>>20, time.Since(start).Round(time.Second))
	if hwm >= limit {
		t.Errorf("the webhook's peak RSS %d MiB reached the chart's memory limit of %d MiB", hwm>>20, limit>>20)
	}
}
