//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/harness"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// The soak's operations, switchable with SOAK_OPS (comma-separated; default all).
// The convergence loop's settings in the soak: short, so a blocked pool's seats fall
// back and come back within a run.
const (
	soakFallbackAfter    = 30 * time.Second
	soakFallbackCooldown = 60 * time.Second
)

const (
	opScale    = "scale"    // scale a workload to a random size
	opFlap     = "flap"     // up, down and up again within seconds
	opRestart  = "restart"  // rollout restart
	opDelete   = "delete"   // delete random pods
	opAnnotate = "annotate" // switch the strategy on the pod template (a new revision)
	opBlock    = "block"    // block a NodePool (limits cpu 0) for a few operations, then unblock it
	opKill     = "kill"     // SIGKILL a webhook replica, restart it a few seconds later
)

var allSoakOps = []string{opScale, opFlap, opRestart, opDelete, opAnnotate, opBlock, opKill}

// soakWorkload is one workload of the soak and the two strategies it switches between.
type soakWorkload struct {
	kind       string // deployment or statefulset
	name       string
	strategies [2]string
	current    int // index of the strategy on the template
	onTemplate bool
}

// violation is one broken invariant at a quiescent point.
type violation struct {
	at, last                   int // quiescent points where it was first and last seen
	workload, expected, actual string
}

// soak is the state of one soak run.
type soak struct {
	t         *testing.T
	ns        string
	rng       *rand.Rand
	ops       map[string]bool
	workloads []*soakWorkload
	replicas  []*harness.Serve

	done       map[string]int
	points     int
	violations []violation
	restarts   int
	blocked    map[string]int    // NodePool -> operations left until it is unblocked
	limits     map[string]string // NodePool -> its spec.limits before blocking (JSON)
	restarting chan error        // a killed replica's restart, running
	collecting bool              // violate collects into found instead of recording
	found      []violation       // what the last check found
	// slowAPI holds the replicas' Lease writes back by latency (SOAK_API_LATENCY).
	slowAPI *harness.SlowAPI
	latency string
	warmRSS map[*harness.Serve]float64
	endRSS  map[*harness.Serve]float64
	// outside is a namespace that is not enabled, with an annotated Deployment: the API
	// server never sends its pods, and no replica may ever evict one; outsideStart are
	// its pods at the start (UID -> name), which must stay.
	outside      string
	outsideStart map[types.UID]string
	// watch sees the namespace's pods and workloads; changes are the soak's operations on
	// workloads, maxReplicas the most replicas each was given: for the eviction budget.
	watch       *soakWatch
	changes     []workloadChange
	maxReplicas map[string]int
	budget      string // what checkEvictionBudget measured, for the summary
}

// TestSoak is `make soak DURATION=...` (and 2 minutes of `make test`): random
// operations on 5 Deployments and a StatefulSet with different strategies, behind two
// webhook replicas, and an invariant checker at every quiescent point. Skipped
// unless SOAK_DURATION is set. SOAK_SEED repeats a run; SOAK_OPS picks operations;
// SOAK_SETTLE_TIMEOUT bounds each wait for quiescence (default 3m), and
// SOAK_CONVERGE_TIMEOUT the wait for an exact verdict after it (default 3m);
// SOAK_PENDING_MAX is the fallback window no pod may stay Pending beyond (default 2m).
// SOAK_API_LATENCY (e.g. 1s-3s) holds every Lease write of the webhook replicas back
// that long, through a proxy in front of the API server (harness.SlowAPI).
func TestSoak(t *testing.T) {
	durStr := os.Getenv("SOAK_DURATION")
	if durStr == "" {
		t.Skip("SOAK_DURATION not set")
	}
	duration, err := time.ParseDuration(durStr)
	if err != nil {
		t.Fatalf("SOAK_DURATION: %v", err)
	}
	seed := time.Now().UnixNano()
	if v := os.Getenv("SOAK_SEED"); v != "" {
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("SOAK_SEED: %v", err)
		}
	}
	ops := map[string]bool{}
	if v := os.Getenv("SOAK_OPS"); v != "" && v != "all" {
		for _, op := range strings.Split(v, ",") {
			op = strings.TrimSpace(op)
			if !slices.Contains(allSoakOps, op) {
				t.Fatalf("SOAK_OPS: unknown operation %q (known: %s)", op, strings.Join(allSoakOps, ","))
			}
			ops[op] = true
		}
	} else {
		for _, op := range allSoakOps {
			ops[op] = true
		}
	}
	fmt.Printf("soak: seed %d (SOAK_SEED=%d repeats it), duration %s, operations %s\n", seed, seed, duration, strings.Join(enabled(ops), ","))

	ctx := context.Background()
	// Two replicas as the chart runs them, with the convergence loop on (short
	// settings, so a blocked pool's seats fall back and return within the run); the
	// shared webhook of the other tests stays up but out of the registration meanwhile.
	replicaEnv := []string{"CONVERGE=on", "FALLBACK_AFTER=" + soakFallbackAfter.String(), "FALLBACK_COOLDOWN=" + soakFallbackCooldown.String()}
	latency := os.Getenv("SOAK_API_LATENCY")
	var slow *harness.SlowAPI
	if latency != "" {
		lo, hi, err := harness.ParseDelayRange(latency)
		if err != nil {
			t.Fatalf("SOAK_API_LATENCY: %v", err)
		}
		if slow, err = harness.StartSlowAPI(env.webhookKubeconfig, t.TempDir(), harness.LeaseWritesBetween(lo, hi)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := slow.Close(); err != nil {
				t.Error(err)
			}
		})
		if err := slow.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		replicaEnv = append(replicaEnv, "KUBECONFIG="+slow.Kubeconfig)
		fmt.Printf("soak: every Lease write of the webhook replicas held back %s\n", latency)
	}
	var replicas []*harness.Serve
	for i, delta := range []int{1, 3} {
		r := env.newWebhook(fmt.Sprintf("webhook-e2e-soak%d", i+1), env.webhook.Port+delta, replicaEnv...)
		if err := r.Start(ctx); err != nil {
			t.Fatalf("starting webhook replica %d: %v", i+1, err)
		}
		replicas = append(replicas, r)
	}
	s := &soak{
		t: t, rng: rand.New(rand.NewPCG(uint64(seed), 0)), ops: ops,
		replicas: replicas,
		done:     map[string]int{}, blocked: map[string]int{}, limits: map[string]string{}, maxReplicas: map[string]int{},
		warmRSS: map[*harness.Serve]float64{}, endRSS: map[*harness.Serve]float64{},
		slowAPI: slow, latency: latency,
	}
	t.Cleanup(func() {
		s.waitRestart()
		s.unblockAll(context.Background())
		for i, r := range replicas {
			if !r.Running() {
				continue
			}
			if err := r.Stop(); err != nil {
				t.Errorf("stopping webhook replica %d: %v", i+1, err)
			}
		}
	})
	lb := startBalancer(t, env.webhook.Port+2, replicas[0].Port, replicas[1].Port)
	if err := env.registerAt(ctx, "full", lb.port); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.register(context.Background(), "full"); err != nil {
			t.Errorf("registering the single webhook again: %v", err)
		}
	})
	s.ns = newNamespace(ctx, t, "e2e-soak")
	before, err := harness.APIServerMetrics(ctx, env.client)
	if err != nil {
		t.Fatal(err)
	}

	if s.watch, err = startSoakWatch(ctx, s.ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.watch.Stop)
	s.outside = newNamespaceLabelled(ctx, t, "e2e-soak-outside", nil)
	createDeployment(ctx, t, deployment(s.outside, "outside", capacityStrategy, 3, true))
	s.createWorkloads(ctx)
	settled(ctx, t, s.outside, "outside", 3)
	if s.outsideStart, err = s.outsidePods(ctx); err != nil {
		t.Fatal(err)
	}
	s.quiescentPoint(ctx) // warm-up: the memory baseline is taken here
	deadline := time.Now().Add(duration)
	for time.Now().Before(deadline) {
		for range 3 + s.rng.IntN(5) {
			s.randomOp(ctx)
			time.Sleep(time.Duration(s.rng.IntN(2500)) * time.Millisecond)
		}
		s.quiescentPoint(ctx)
	}
	// The end: every pool unblocked, every replica up, one last check.
	s.unblockAll(ctx)
	s.quiescentPoint(ctx)
	s.checkMemory()
	s.checkEvictionBudget()

	s.summary(seed, duration, admissionLatencySince(ctx, t, before), lb.served())
}

func enabled(ops map[string]bool) []string {
	var out []string
	for _, op := range allSoakOps {
		if ops[op] {
			out = append(out, op)
		}
	}
	return out
}

// createWorkloads creates 5 Deployments and a StatefulSet with different
// strategies, rollout strategies and places for the strategy annotation.
func (s *soak) createWorkloads(ctx context.Context) {
	t := s.t
	const (
		nodesize = "nodesize=od4vcpu16gb,base=1,weight=0:nodesize=spot4vcpu16gb,weight=1:nodesize=spot8vcpu32gb,weight=1"
		spotOnly = "nodesize=spot4vcpu16gb,weight=1:nodesize=spot8vcpu32gb,weight=2"
		capSpot  = "karpenter.sh/capacity-type=spot,base=3,weight=1:karpenter.sh/capacity-type=on-demand,weight=1"
	)
	s.workloads = []*soakWorkload{
		{kind: "deployment", name: "rolling", strategies: [2]string{capacityStrategy, capSpot}, onTemplate: true},
		{kind: "deployment", name: "nodesize", strategies: [2]string{nodesize, spotOnly}, onTemplate: true},
		{kind: "deployment", name: "recreate", strategies: [2]string{spotOnly, nodesize}, onTemplate: true},
		{kind: "deployment", name: "surge", strategies: [2]string{capSpot, capacityStrategy}, onTemplate: true},
		// The strategy on the Deployment itself: annotate does not apply (no new revision).
		{kind: "deployment", name: "ondeploy", strategies: [2]string{capacityStrategy, capacityStrategy}},
		{kind: "statefulset", name: "sts", strategies: [2]string{capacityStrategy, capSpot}, onTemplate: true},
	}
	for _, w := range s.workloads {
		n := 2 + s.rng.IntN(6)
		s.maxReplicas[w.name] = n
		switch w.kind {
		case "deployment":
			d := deployment(s.ns, w.name, w.strategies[0], n, w.onTemplate)
			soakPod(&d.Spec.Template)
			switch w.name {
			case "recreate":
				d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
			case "surge":
				d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{
					MaxSurge: ptr(intstrPercent(100)), MaxUnavailable: ptr(intstrPercent(0)),
				}
			}
			createDeployment(ctx, t, d)
		case "statefulset":
			tmpl := podTemplate(w.name, map[string]string{strategy.AnnotationStrategy: w.strategies[0]})
			soakPod(&tmpl)
			sts := &appsv1.StatefulSet{
				ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: s.ns},
				Spec: appsv1.StatefulSetSpec{
					Replicas:            ptr(int32(n)),
					Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.name}},
					Template:            tmpl,
					PodManagementPolicy: appsv1.ParallelPodManagement,
				},
			}
			if _, err := env.client.AppsV1().StatefulSets(s.ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
				t.Fatalf("creating statefulset %s: %v", w.name, err)
			}
		}
	}
}

// soakPod makes the pods big enough (a quarter CPU: about 15 on a 4-CPU node) that
// scale-ups keep needing new nodes, so that a blocked NodePool matters.
func soakPod(tmpl *corev1.PodTemplateSpec) {
	tmpl.Spec.TerminationGracePeriodSeconds = ptr(int64(1))
	tmpl.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("250m")
}

// randomOp runs one enabled operation on a random workload and logs it, so that a
// violation can be traced back to the operations before it.
func (s *soak) randomOp(ctx context.Context) {
	ops := enabled(s.ops)
	op := ops[s.rng.IntN(len(ops))]
	w := s.workloads[s.rng.IntN(len(s.workloads))]
	what := w.kind + "/" + w.name
	var err error
	start := time.Now()
	switch op {
	case opScale:
		n := 1 + s.rng.IntN(12)
		what += fmt.Sprintf(" to %d", n)
		err = s.scale(ctx, w, n)
	case opFlap:
		sizes := []int{8 + s.rng.IntN(8), 1 + s.rng.IntN(4), 5 + s.rng.IntN(10)}
		what += fmt.Sprintf(" to %d, %d, %d", sizes[0], sizes[1], sizes[2])
		for i, n := range sizes {
			if i > 0 {
				time.Sleep(time.Duration(500+s.rng.IntN(2500)) * time.Millisecond)
			}
			if err = s.scale(ctx, w, n); err != nil {
				break
			}
		}
	case opRestart:
		err = s.patchTemplate(ctx, w, "kubectl.kubernetes.io/restartedAt", time.Now().Format(time.RFC3339Nano))
	case opDelete:
		var names []string
		names, err = s.deletePods(ctx, w, 1+s.rng.IntN(3))
		what += " pods " + strings.Join(names, " ")
	case opAnnotate:
		if !w.onTemplate {
			n := 1 + s.rng.IntN(12)
			op, what = opScale, what+fmt.Sprintf(" to %d (its strategy is on the Deployment: no new revision)", n)
			err = s.scale(ctx, w, n)
			break
		}
		w.current = 1 - w.current
		what += " strategy " + w.strategies[w.current]
		err = s.patchTemplate(ctx, w, strategy.AnnotationStrategy, w.strategies[w.current])
	case opBlock:
		what, err = s.block(ctx)
	case opKill:
		what, err = s.kill()
	}
	s.done[op]++
	if op != opBlock && op != opKill {
		s.noteChange(w.name, start)
	}
	fmt.Printf("soak: op %d: %s %s\n", sum(s.done), op, what)
	if err != nil {
		s.t.Errorf("operation %s %s: %v", op, what, err)
		return
	}
	// A blocked pool stays blocked for a few operations.
	for pool, left := range s.blocked {
		if left <= 1 {
			if err := s.unblock(ctx, pool); err != nil {
				s.t.Errorf("unblocking NodePool %s: %v", pool, err)
			}
		} else {
			s.blocked[pool] = left - 1
		}
	}
}

func (s *soak) scale(ctx context.Context, w *soakWorkload, n int) error {
	s.maxReplicas[w.name] = max(s.maxReplicas[w.name], n)
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, n))
	var err error
	if w.kind == "deployment" {
		_, err = env.client.AppsV1().Deployments(s.ns).Patch(ctx, w.name, types.MergePatchType, patch, metav1.PatchOptions{})
	} else {
		_, err = env.client.AppsV1().StatefulSets(s.ns).Patch(ctx, w.name, types.MergePatchType, patch, metav1.PatchOptions{})
	}
	return err
}

func (s *soak) patchTemplate(ctx context.Context, w *soakWorkload, key, value string) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{key: value}}}}})
	if err != nil {
		return err
	}
	if w.kind == "deployment" {
		_, err = env.client.AppsV1().Deployments(s.ns).Patch(ctx, w.name, types.MergePatchType, patch, metav1.PatchOptions{})
	} else {
		_, err = env.client.AppsV1().StatefulSets(s.ns).Patch(ctx, w.name, types.MergePatchType, patch, metav1.PatchOptions{})
	}
	return err
}

func (s *soak) deletePods(ctx context.Context, w *soakWorkload, n int) ([]string, error) {
	list, err := env.client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + w.name})
	if err != nil {
		return nil, err
	}
	pods := list.Items
	// Sorted first: the list's order is not part of the seed.
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	s.rng.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
	var names []string
	for _, p := range pods[:min(n, len(pods))] {
		if err := env.client.CoreV1().Pods(s.ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return names, err
		}
		names = append(names, fmt.Sprintf("%s(seat %s)", p.Name, p.Annotations[strategy.AnnotationSeat]))
	}
	return names, nil
}

// soakPools are the NodePools the soak's strategies use.
var soakPools = []string{"od-4vcpu-16gb", "spot-4vcpu-16gb", "spot-8vcpu-32gb", "on-demand", "spot"}

// block sets a NodePool's cpu limit to 0 (no new nodes) for 1-4 operations.
func (s *soak) block(ctx context.Context) (string, error) {
	pool := soakPools[s.rng.IntN(len(soakPools))]
	if _, ok := s.blocked[pool]; ok {
		return "NodePool " + pool + " (already blocked)", nil
	}
	out, stderr, err := kubectl(ctx, "", "get", "nodepool", pool, "-o", "jsonpath={.spec.limits}")
	if err != nil {
		return pool, fmt.Errorf("reading NodePool %s: %v: %s", pool, err, stderr)
	}
	if out == "" {
		out = "null"
	}
	if _, stderr, err := kubectl(ctx, "", "patch", "nodepool", pool, "--type=merge", "-p", `{"spec":{"limits":{"cpu":"0"}}}`); err != nil {
		return pool, fmt.Errorf("blocking NodePool %s: %v: %s", pool, err, stderr)
	}
	s.limits[pool] = out
	s.blocked[pool] = 2 + s.rng.IntN(4)
	return fmt.Sprintf("NodePool %s for %d operations", pool, s.blocked[pool]), nil
}

func (s *soak) unblock(ctx context.Context, pool string) error {
	// A merge patch replaces the limits map as a whole (null removes it).
	patch := `{"spec":{"limits":null}}`
	if _, stderr, err := kubectl(ctx, "", "patch", "nodepool", pool, "--type=merge", "-p", patch); err != nil {
		return fmt.Errorf("%v: %s", err, stderr)
	}
	if old := s.limits[pool]; old != "null" {
		if _, stderr, err := kubectl(ctx, "", "patch", "nodepool", pool, "--type=merge", "-p", `{"spec":{"limits":`+old+`}}`); err != nil {
			return fmt.Errorf("%v: %s", err, stderr)
		}
	}
	delete(s.blocked, pool)
	delete(s.limits, pool)
	return nil
}

func (s *soak) unblockAll(ctx context.Context) {
	for pool := range s.blocked {
		if err := s.unblock(ctx, pool); err != nil {
			s.t.Errorf("unblocking NodePool %s: %v", pool, err)
		}
	}
}

// kill SIGKILLs a random webhook replica and restarts it 1-5 s later, while the
// operations go on (the proxy answers 502 for it meanwhile, as a Service endpoint
// that is not yet removed would fail).
func (s *soak) kill() (string, error) {
	if s.restarting != nil {
		return "(a replica is down already)", nil // one at a time, as a PodDisruptionBudget allows
	}
	i := s.rng.IntN(len(s.replicas))
	r := s.replicas[i]
	if err := r.Kill(); err != nil {
		return "", err
	}
	delete(s.warmRSS, r)
	delay := time.Duration(1000+s.rng.IntN(4000)) * time.Millisecond
	ch := make(chan error, 1)
	s.restarting = ch
	go func() {
		time.Sleep(delay)
		ch <- r.Start(context.Background())
	}()
	return fmt.Sprintf("webhook replica %d, restart in %s", i+1, delay), nil
}

// waitRestart waits for a killed replica to be back.
func (s *soak) waitRestart() {
	if s.restarting == nil {
		return
	}
	if err := <-s.restarting; err != nil {
		s.t.Errorf("restarting a killed webhook replica: %v", err)
	} else {
		s.restarts++
	}
	s.restarting = nil
}

func intstrPercent(p int) intstr.IntOrString { return intstr.FromString(fmt.Sprintf("%d%%", p)) }

func (s *soak) violate(workload, expected, actual string) {
	if s.collecting {
		s.found = append(s.found, violation{workload: workload, expected: expected, actual: actual})
		return
	}
	v := violation{at: s.points, workload: workload, expected: expected, actual: actual}
	for i := range s.violations {
		if p := &s.violations[i]; p.workload == workload && p.expected == expected && p.actual == actual && p.last == s.points-1 {
			p.last = s.points // the same state as at the last point: nothing new to say
			return
		}
	}
	v.last = v.at
	s.violations = append(s.violations, v)
	s.t.Errorf("quiescent point %d: %s: expected %s, actual %s", v.at, workload, expected, actual)
}

// quiescentPoint waits (bounded) until every workload has settled, then checks
// every invariant.
func (s *soak) quiescentPoint(ctx context.Context) {
	s.waitRestart()
	s.points++
	timeout := 3 * time.Minute
	if v, err := time.ParseDuration(os.Getenv("SOAK_SETTLE_TIMEOUT")); err == nil {
		timeout = v
	}
	start := time.Now()
	for _, w := range s.workloads {
		if state, ok := s.waitSettled(ctx, w, timeout-time.Since(start)); !ok {
			s.violate(w.kind+"/"+w.name, "settled within "+timeout.String(), state)
		}
	}
	fmt.Printf("soak: quiescent point %d after %.1fs of settling (%d operations so far)\n", s.points, time.Since(start).Seconds(), sum(s.done))
	// Placement may converge after the pods run (a repair loop): the product's verdict
	// and the seats get SOAK_CONVERGE_TIMEOUT (default 3m) to become right. What the
	// product promises after a replica is killed is that long: a seat the killed owner
	// answered whose pod the next owner did not see in time can be handed out twice, and
	// a reservation it listed holds its seat until the reservation TTL, so a replacement
	// may take a seat above the replica count; the loop moves it, and a move that comes
	// back in the same state is held by the repeat guard 20 s, then 40 s. The loop breaks
	// as soon as everything is right.
	converge := 3 * time.Minute
	if v, err := time.ParseDuration(os.Getenv("SOAK_CONVERGE_TIMEOUT")); err == nil {
		converge = v
	}
	for until := time.Now().Add(converge); ; time.Sleep(3 * time.Second) {
		s.collecting, s.found = true, nil
		s.checkSpread(ctx)
		s.checkSeatsAndPending(ctx)
		s.collecting = false
		if len(s.found) == 0 || time.Now().After(until) {
			break
		}
	}
	for _, v := range s.found {
		s.violate(v.workload, v.expected, v.actual)
	}
	s.checkLeases(ctx)
	if n := len(auditEvictions(s.t, s.outside)); n > 0 {
		s.violate("namespace "+s.outside+" (not enabled)", "no pod evicted by the webhook", fmt.Sprintf("%d evictions in the API server's audit log", n))
	}
	s.checkOutside(ctx)
	for _, r := range s.replicas {
		rss, err := s.rss(ctx, r)
		if err != nil {
			s.t.Errorf("reading the RSS of the webhook on port %d: %v", r.Port, err)
			continue
		}
		if _, ok := s.warmRSS[r]; !ok {
			s.warmRSS[r] = rss // first quiescent point since (re)start: warmed up
		}
		s.endRSS[r] = rss
	}
}

// waitSettled waits until the workload runs exactly its replicas, all Running and of
// its current revision, nothing terminating. It returns the last state seen.
func (s *soak) waitSettled(ctx context.Context, w *soakWorkload, timeout time.Duration) (string, bool) {
	var state string
	err := wait.PollUntilContextTimeout(ctx, time.Second, max(timeout, time.Second), true, func(ctx context.Context) (bool, error) {
		want, revLabel, rev, ok, st := s.workloadStatus(ctx, w)
		state = st
		if !ok {
			return false, nil
		}
		list, err := env.client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + w.name})
		if err != nil {
			state = err.Error()
			return false, nil
		}
		var current, other, notRunning int
		for _, p := range list.Items {
			switch {
			case p.DeletionTimestamp != nil || p.Labels[revLabel] != rev:
				other++
			case p.Status.Phase != corev1.PodRunning:
				notRunning++
			default:
				current++
			}
		}
		state += fmt.Sprintf("; pods: %d Running of the current revision, %d not Running, %d terminating or older", current, notRunning, other)
		return current == want && notRunning == 0 && other == 0, nil
	})
	return state, err == nil
}

// workloadStatus reads the workload's wanted replicas and current revision, and
// whether its controller reports the rollout complete.
func (s *soak) workloadStatus(ctx context.Context, w *soakWorkload) (want int, revLabel, rev string, done bool, state string) {
	if w.kind == "statefulset" {
		sts, err := env.client.AppsV1().StatefulSets(s.ns).Get(ctx, w.name, metav1.GetOptions{})
		if err != nil {
			return 0, "", "", false, err.Error()
		}
		want, st := int(*sts.Spec.Replicas), sts.Status
		state = fmt.Sprintf("statefulset generation %d/%d, replicas %d ready %d, revision %s/%s (want %d)",
			st.ObservedGeneration, sts.Generation, st.Replicas, st.ReadyReplicas, st.CurrentRevision, st.UpdateRevision, want)
		done = st.ObservedGeneration >= sts.Generation && int(st.Replicas) == want && int(st.ReadyReplicas) == want &&
			int(st.UpdatedReplicas) == want
		return want, appsv1.ControllerRevisionHashLabelKey, st.UpdateRevision, done, state
	}
	d, err := env.client.AppsV1().Deployments(s.ns).Get(ctx, w.name, metav1.GetOptions{})
	if err != nil {
		return 0, "", "", false, err.Error()
	}
	want, st := int(*d.Spec.Replicas), d.Status
	state = fmt.Sprintf("deployment generation %d/%d, replicas %d updated %d ready %d (want %d)",
		st.ObservedGeneration, d.Generation, st.Replicas, st.UpdatedReplicas, st.ReadyReplicas, want)
	done = st.ObservedGeneration >= d.Generation && int(st.Replicas) == want && int(st.UpdatedReplicas) == want &&
		int(st.ReadyReplicas) == want && int(st.AvailableReplicas) == want
	if !done {
		return want, "", "", false, state
	}
	hash, err := currentTemplateHash(ctx, d)
	if err != nil {
		return want, "", "", false, state + "; " + err.Error()
	}
	return want, appsv1.DefaultDeploymentUniqueLabelKey, hash, true, state
}

// spreadReport is the part of `spread -o json` the soak reads.
type spreadReport struct {
	Workloads []struct {
		Kind           string `json:"kind"`
		Name           string `json:"name"`
		Replicas       int    `json:"replicas"`
		Error          string `json:"error"`
		Unplaced       int    `json:"unplaced"`
		OtherRevisions int    `json:"otherRevisions"`
		State          string `json:"state"`
		Terms          []struct {
			Target int `json:"target"`
			Placed int `json:"placed"`
		} `json:"terms"`
	} `json:"workloads"`
}

// checkSpread takes the product's own verdict: every workload exact per `spread -o json`.
func (s *soak) checkSpread(ctx context.Context) {
	cmd := exec.CommandContext(ctx, env.webhook.Bin, "spread", "-n", s.ns, "-o", "json", "--kubeconfig", env.hc.Kubeconfig())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Exit 3 to 6: some workload is not exact, reported below from the JSON.
	if err := cmd.Run(); err != nil && (cmd.ProcessState.ExitCode() < 3 || cmd.ProcessState.ExitCode() > 6) {
		s.violate("spread", "spread -o json runs", fmt.Sprintf("%v: %s", err, stderr.String()))
		return
	}
	var r spreadReport
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		s.violate("spread", "JSON", err.Error())
		return
	}
	seen := map[string]bool{}
	for _, w := range r.Workloads {
		name := strings.ToLower(w.Kind) + "/" + w.Name
		seen[name] = true
		var target, placed []string
		for _, term := range w.Terms {
			target = append(target, strconv.Itoa(term.Target))
			placed = append(placed, strconv.Itoa(term.Placed))
		}
		// In fallback (a blocked pool's seats on their fallback term) the pods stand
		// where the placement wants them now: what the loop owes at a quiescent point.
		if (w.State != "exact" && w.State != "fallback") || w.Error != "" || w.Unplaced > 0 || w.OtherRevisions > 0 {
			s.violate(name, fmt.Sprintf("exact at %d replicas: %s per term", w.Replicas, strings.Join(target, "/")),
				fmt.Sprintf("%s placed, %d unplaced, %d of other revisions %s", strings.Join(placed, "/"), w.Unplaced, w.OtherRevisions, w.Error))
		}
	}
	for _, w := range s.workloads {
		if !seen[w.kind+"/"+w.name] {
			s.violate(w.kind+"/"+w.name, "in spread's report", "missing")
		}
	}
}

// checkSeatsAndPending checks per revision that seats are 1..N with none held
// twice, and that no pod has been Pending longer than the fallback window.
func (s *soak) checkSeatsAndPending(ctx context.Context) {
	pendingMax := 2 * time.Minute
	if v, err := time.ParseDuration(os.Getenv("SOAK_PENDING_MAX")); err == nil {
		pendingMax = v
	}
	list, err := env.client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Errorf("listing pods: %v", err)
		return
	}
	seats := map[string][]int{}
	unseated := map[string][]string{}
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		if p.Status.Phase == corev1.PodPending && time.Since(p.CreationTimestamp.Time) > pendingMax {
			s.violate("pod "+p.Name, "Pending at most "+pendingMax.String(), fmt.Sprintf("Pending for %s", time.Since(p.CreationTimestamp.Time).Round(time.Second)))
		}
		rev := p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] + p.Labels[appsv1.ControllerRevisionHashLabelKey]
		key := p.Labels["app"] + "@" + rev
		seat, err := strconv.Atoi(p.Annotations[strategy.AnnotationSeat])
		if err != nil {
			unseated[key] = append(unseated[key], p.Name)
			continue
		}
		seats[key] = append(seats[key], seat)
	}
	for key, names := range unseated {
		sort.Strings(names)
		s.violate(key, "a seat on every pod", fmt.Sprintf("%d without: %s", len(names), strings.Join(names, " ")))
	}
	for key, held := range seats {
		if dup, missing := seatProblems(held, len(held)); len(dup) > 0 || len(missing) > 0 {
			s.violate(key, fmt.Sprintf("seats 1..%d, each once", len(held)), fmt.Sprintf("held twice %s, free %s", compactInts(dup), compactInts(missing)))
		}
	}
}

// checkLeases waits (bounded by the reservation TTL and some) until the Leases of the
// webhook's namespace drop to a bound: per revision at most one seat record and one
// unavailability record, plus the loop's leader Lease. No object is kept per pod, so
// anything above is a leaked record.
func (s *soak) checkLeases(ctx context.Context) {
	var count, bound int
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 45*time.Second, true, func(ctx context.Context) (bool, error) {
		leases, err := env.client.CoordinationV1().Leases(webhookNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		rs, err := env.client.AppsV1().ReplicaSets("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		sts, err := env.client.AppsV1().StatefulSets("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		count, bound = len(leases.Items), 2*(len(rs.Items)+len(sts.Items))+1
		return count <= bound, nil
	})
	if err != nil {
		s.violate("Leases in "+webhookNamespace, fmt.Sprintf("at most %d (two records per revision and the leader Lease)", bound), strconv.Itoa(count))
	}
}

// rss scrapes a replica's process_resident_memory_bytes.
func (s *soak) rss(ctx context.Context, r *harness.Serve) (float64, error) {
	ms, err := r.Metrics(ctx)
	if err != nil {
		return 0, err
	}
	return ms.Sum("process_resident_memory_bytes", nil), nil
}

// checkMemory compares each replica's RSS at the end with the one after its warm-up
// (its first quiescent point since it was last started): flat within
// SOAK_RSS_TOLERANCE (a factor, default 1.5) plus 32 MiB of slack.
func (s *soak) checkMemory() {
	tol := 1.5
	if v, err := strconv.ParseFloat(os.Getenv("SOAK_RSS_TOLERANCE"), 64); err == nil && v > 0 {
		tol = v
	}
	for i, r := range s.replicas {
		warm, end := s.warmRSS[r], s.endRSS[r]
		if warm == 0 {
			continue
		}
		fmt.Printf("soak: replica %d RSS after warm-up %.1f MiB, at the end %.1f MiB\n", i+1, warm/(1<<20), end/(1<<20))
		if end > warm*tol+32<<20 {
			s.violate(fmt.Sprintf("webhook replica %d", i+1), fmt.Sprintf("RSS within %.1fx of %.1f MiB", tol, warm/(1<<20)), fmt.Sprintf("%.1f MiB", end/(1<<20)))
		}
	}
}

func (s *soak) summary(seed int64, duration time.Duration, h harness.Histogram, served []int64) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n===== soak summary (seed %d, %s)\n", seed, duration)
	var ops []string
	for _, op := range allSoakOps {
		if s.ops[op] {
			ops = append(ops, fmt.Sprintf("%s %d", op, s.done[op]))
		}
	}
	fmt.Fprintf(&b, "operations:          %d (%s)\n", sum(s.done), strings.Join(ops, ", "))
	fmt.Fprintf(&b, "quiescent points:    %d\n", s.points)
	fmt.Fprintf(&b, "webhook restarts:    %d survived (SIGKILL, then restart)\n", s.restarts)
	p99 := h.FormatQuantile(0.99)
	fmt.Fprintf(&b, "admissions:          %.0f seen by the API server, p99 %s (apiserver_admission_webhook_admission_duration_seconds); per replica via the proxy %v\n", h.Count(), p99, served)
	if s.slowAPI != nil {
		fmt.Fprintf(&b, "API latency:         every Lease write of the replicas held back %s (%d writes)\n", s.latency, s.slowAPI.Delayed())
	}
	fmt.Fprintf(&b, "loop evictions:      %s\n", s.budget)
	fmt.Fprintf(&b, "violations:          %d\n", len(s.violations))
	sort.SliceStable(s.violations, func(i, j int) bool { return s.violations[i].at < s.violations[j].at })
	for _, v := range s.violations {
		points := strconv.Itoa(v.at)
		if v.last > v.at {
			points += fmt.Sprintf("-%d", v.last)
		}
		fmt.Fprintf(&b, "  point %s  %s: expected %s, actual %s\n", points, v.workload, v.expected, v.actual)
	}
	fmt.Print(b.String())
	if path := os.Getenv("SOAK_SUMMARY"); path != "" {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			s.t.Errorf("writing %s: %v", path, err)
		}
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
