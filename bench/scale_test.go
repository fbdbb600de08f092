//go:build bench

package bench

// TestScale is `make scale` (scripts/scale.sh): many strategy Deployments on one local
// cluster (20,000 pods by default), measured per webhook replica. It reuses the
// benchmark's pieces (two serve replicas behind the round-robin proxy, the
// registration script, /proc CPU, the API server's metrics) and runs serve as the
// chart's ServiceAccount so that the API server's audit log (up.sh records that user)
// counts the product's requests: each replica gets a token of its own, told apart in
// the log by its credential id.
//
// Settings (environment): SCALE_WORKLOADS (Deployments, default 200), SCALE_REPLICAS
// (pods each, default 100), SCALE_WEBHOOK_BIN (built when empty), SCALE_SERVE_ENV
// (extra settings of serve, space-separated KEY=VALUE, after the defaults below),
// SCALE_OUT (also write the tables there), SCALE_CHURN_DEPLOYMENTS (20),
// SCALE_CHURN_SECONDS (120), SCALE_PROBE_WORKLOADS (5), SCALE_PROBE_REPLICAS (20),
// SCALE_RUNNING_TIMEOUT (minutes for all pods Running, default 45: past it the run
// goes on with what is Running and says so).

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/harness"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"golang.org/x/sync/errgroup"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	scaleNS = "scale"
	probeNS = "scale-probe"
	// webhookSA is the chart's ServiceAccount (scripts/localcluster/webhook-rbac.sh).
	webhookSA = "custom-kube-scheduler-webhook"
	// The capacity-loss probe uses the nodesize pools, which the workloads
	// (burstStrategy, on the capacity-type pools) never name, so blocking its spot
	// pool and the unavailability it records touch only the probe's revisions.
	probeStrategy = "nodesize=od4vcpu16gb,base=2,weight=1:nodesize=spot4vcpu16gb,weight=3"
	probePool     = "spot-4vcpu-16gb"
	probeNodes    = "nodesize=spot4vcpu16gb"
	// Convergence settings of the run: FALLBACK_AFTER bounds the capacity-loss probe.
	scaleFallbackAfter    = "60s"
	scaleFallbackCooldown = "2m"
)

var nodePoolGVR = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodepools"}

type scale struct {
	*bench
	t          *testing.T
	dyn        dynamic.Interface
	pods       kubernetes.Interface // protobuf client for the big lists and watches
	env        []string
	jti        []string // each replica's token id, as the audit log names it
	workloads  int
	perWL      int
	auditPath  string
	notes      []string
	emptyLive  []float64 // live heap of each replica with no pod
	startedAll time.Time
}

func TestScale(t *testing.T) {
	if os.Getenv("SCALE_WORKLOADS") == "" {
		t.Skip("SCALE_WORKLOADS not set: run `make scale`")
	}
	ctx := context.Background()
	s, err := setupScale(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.run(ctx); err != nil {
		t.Error(err)
	}
	fmt.Println(s.out.String())
	if path := os.Getenv("SCALE_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(s.out.String()), 0o644); err != nil {
			t.Errorf("writing %s: %v", path, err)
		}
	}
}

func (s *scale) logf(format string, args ...any) {
	s.t.Logf("%s "+format, append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}

func (s *scale) note(format string, args ...any) {
	s.notes = append(s.notes, fmt.Sprintf(format, args...))
	s.logf("NOTE: "+format, args...)
}

func setupScale(ctx context.Context, t *testing.T) (*scale, error) {
	repo, err := filepath.Abs("..")
	if err != nil {
		return nil, err
	}
	dir := os.Getenv("LOCALCLUSTER_DIR")
	if dir == "" {
		return nil, errors.New("LOCALCLUSTER_DIR is not set: run `make scale`")
	}
	c, err := harness.OpenCluster(dir)
	if err != nil {
		return nil, err
	}
	s := &scale{bench: &bench{c: c, repo: repo}, t: t,
		workloads: envInt("SCALE_WORKLOADS", 200), perWL: envInt("SCALE_REPLICAS", 100),
		auditPath: filepath.Join(dir, "logs", "audit.jsonl")}
	if s.dyn, err = dynamic.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	pcfg := *c.Config
	pcfg.ContentType = "application/vnd.kubernetes.protobuf"
	pcfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	if s.pods, err = kubernetes.NewForConfig(&pcfg); err != nil {
		return nil, err
	}
	bin := os.Getenv("SCALE_WEBHOOK_BIN")
	if bin == "" {
		if bin, err = goBuild(ctx, t, repo, "./cmd/custom-kube-scheduler-webhook"); err != nil {
			return nil, err
		}
	}
	for _, ns := range []string{webhookNS, scaleNS, probeNS} {
		// Opted in (the default scope); the blocklisted ones stay excluded by the blocklist.
		labels := map[string]string{strategy.LabelNamespaceEnabled: "true"}
		_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	s.env = []string{
		chartGOGC, chartGOMEMLIMIT,
		"LOG_LEVEL=info",
		"BLOCKLISTED_NAMESPACE_LIST=" + blocklist,
		"POD_NAMESPACE=" + webhookNS,
		// /debug/pprof/heap?gc=1 forces the collection the memory figures follow.
		"PROFILING=on",
		"FALLBACK_AFTER=" + scaleFallbackAfter, "FALLBACK_COOLDOWN=" + scaleFallbackCooldown,
	}
	s.env = append(s.env, strings.Fields(os.Getenv("SCALE_SERVE_ENV"))...)
	port := c.WebhookPort()
	for i := range 2 {
		kc, jti, err := s.tokenKubeconfig(ctx, filepath.Join(t.TempDir(), "kubeconfig"))
		if err != nil {
			return nil, err
		}
		s.jti = append(s.jti, jti)
		// The harness's admin KUBECONFIG is overridden: serve runs as the chart's ServiceAccount.
		srv := c.NewServe(bin, fmt.Sprintf("webhook-scale-%d", i+1), port+i, append(slicesClone(s.env), "KUBECONFIG="+kc)...)
		if err := srv.Start(ctx); err != nil {
			return nil, err
		}
		s.replicas = append(s.replicas, srv)
		t.Cleanup(func() {
			if err := srv.Stop(); err != nil {
				t.Errorf("stopping %s: %v", srv.Name, err)
			}
		})
	}
	if s.proxy, err = c.StartProxy(port+2, port, port+1); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.proxy.Close(ctx)
	})
	if err := s.register(ctx, port+2); err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = s.runScript(context.Background(), "register-webhook.sh", port+2, "delete") })
	return s, nil
}

func slicesClone(in []string) []string { return append([]string(nil), in...) }

// tokenKubeconfig writes to path a copy of the cluster's webhook-kubeconfig with a
// fresh token of the chart's ServiceAccount, and returns the token's id (jti).
func (s *scale) tokenKubeconfig(ctx context.Context, path string) (string, string, error) {
	day := int64(24 * 3600)
	tr, err := s.c.Client.CoreV1().ServiceAccounts(webhookNS).CreateToken(ctx, webhookSA,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &day}}, metav1.CreateOptions{})
	if err != nil {
		return "", "", fmt.Errorf("minting a token of %s: %w", webhookSA, err)
	}
	cfg, err := clientcmd.LoadFromFile(filepath.Join(s.c.Dir, "webhook-kubeconfig"))
	if err != nil {
		return "", "", fmt.Errorf("reading webhook-kubeconfig (up.sh writes it): %w", err)
	}
	for _, a := range cfg.AuthInfos {
		a.Token = tr.Status.Token
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", "", err
	}
	parts := strings.Split(tr.Status.Token, ".")
	if len(parts) != 3 {
		return "", "", errors.New("the token is not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", "", fmt.Errorf("decoding the token: %w", err)
	}
	var claims struct {
		JTI string `json:"jti"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return "", "", fmt.Errorf("decoding the token's claims: %w", err)
	}
	return path, claims.JTI, nil
}

// replicaFigures is what the table shows of one replica.
type replicaFigures struct {
	role             string
	live, inuse, rss float64
	perPod           float64 // live heap per cached pod, bytes
	cpu              float64 // cores at steady state
	reqs             float64 // API requests per second at steady state
	reqsBy           map[string]int
	ready            time.Duration
	hwm              float64
	served           harness.Histogram
	restartErr       string
}

// productCounters are the replicas' counters of what the convergence loop did, summed.
type productCounters struct {
	marks     map[string]float64 // by term
	evictions float64
}

func (a productCounters) sub(b productCounters) productCounters {
	out := productCounters{marks: map[string]float64{}, evictions: a.evictions - b.evictions}
	for k, v := range a.marks {
		if d := v - b.marks[k]; d != 0 {
			out.marks[k] = d
		}
	}
	return out
}

func (a productCounters) formatMarks() string {
	if len(a.marks) == 0 {
		return "0"
	}
	var parts []string
	total := 0.0
	for k, v := range a.marks {
		parts = append(parts, fmt.Sprintf("%s: %.0f", k, v))
		total += v
	}
	sort.Strings(parts)
	return fmt.Sprintf("%.0f (%s)", total, strings.Join(parts, ", "))
}

type phaseCounters struct {
	name  string
	delta productCounters
}

// counters sums the convergence counters of the running replicas.
func (s *scale) counters(ctx context.Context) productCounters {
	out := productCounters{marks: map[string]float64{}}
	for _, r := range s.replicas {
		ms, err := r.Metrics(ctx)
		if err != nil {
			s.note("scraping %s: %v", r.Name, err)
			continue
		}
		for k, v := range ms.SumBy("custom_kube_scheduler_webhook_terms_marked_unavailable_total", "term", nil) {
			out.marks[k] += v
		}
		out.evictions += ms.Sum("custom_kube_scheduler_webhook_converge_evictions_total", nil)
	}
	return out
}

// watchReady polls r's /readyz every 20 ms from now on and returns a function that
// gives the time of its first 200 (waiting for it): finer than the harness's 200 ms.
func (s *scale) watchReady(ctx context.Context, r *harness.Serve) func() time.Time {
	done := make(chan time.Time, 1)
	hc := s.c.HTTPClient(time.Second)
	url := r.HealthURL("/readyz")
	go func() {
		defer hc.CloseIdleConnections()
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			if resp, err := hc.Get(url); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					done <- time.Now()
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		done <- time.Now()
	}()
	return func() time.Time { return <-done }
}

func (s *scale) run(ctx context.Context) error {
	n := s.workloads * s.perWL
	host, _ := os.Hostname()
	figs := make([]replicaFigures, len(s.replicas))

	if err := s.emptyMemory(ctx); err != nil {
		return err
	}

	// 6 (small): capacity loss on the empty cluster, before scaling up.
	small, err := s.capacityLoss(ctx, "small")
	if err != nil {
		return fmt.Errorf("capacity-loss probe on the small cluster: %w", err)
	}

	// What the product does in each phase: terms marked unavailable, evictions.
	var phases []phaseCounters
	snap := func(name string, from productCounters) productCounters {
		now := s.counters(ctx)
		phases = append(phases, phaseCounters{name: name, delta: now.sub(from)})
		return now
	}
	mark := s.counters(ctx)

	// Scale up.
	s.logf("creating %d Deployments of %d pods (%d pods)", s.workloads, s.perWL, n)
	upStart := time.Now()
	running, deleted, allRunning, err := s.scaleUp(ctx, n)
	if err != nil {
		return err
	}
	nodes, err := s.c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return err
	}
	s.logf("%d of %d pods Running after %s, %d nodes; %d pods deleted on the way", running, n, allRunning.Round(time.Second), len(nodes.Items), deleted)
	_ = upStart

	// 1: memory at full size.
	waited, rate := waitQuiet(ctx, 3*time.Minute)
	s.logf("quiet (%.2f cores) after %s", rate, waited.Round(time.Second))
	mark = snap(fmt.Sprintf("creating the %d pods, until all Running and the machine quiet", n), mark)
	if err := s.fullMemory(ctx, figs, running); err != nil {
		return err
	}

	// 3 and 4: CPU and API requests at steady state over 60 s.
	machine, err := s.steadyState(ctx, figs)
	if err != nil {
		return err
	}

	// 5: admission latency while Deployments scale up and down.
	churn, err := s.churn(ctx, figs)
	if err != nil {
		return err
	}

	snap("steady state and the churn", mark)

	// 2: restart each replica in turn (SIGTERM, start again) at full size.
	if err := s.restartEach(ctx, figs); err != nil {
		return err
	}

	// 6 (full): capacity loss at full size.
	waited, rate = waitQuiet(ctx, 3*time.Minute)
	s.logf("quiet (%.2f cores) after %s", rate, waited.Round(time.Second))
	mark = s.counters(ctx) // the restarted processes count from 0
	full, err := s.capacityLoss(ctx, "full")
	if err != nil {
		s.note("capacity-loss probe at full size: %v", err)
	}
	snap("the capacity-loss probe at full size (one term of 5 probe revisions lost)", mark)
	after, err := harness.APIServerMetrics(ctx, s.c.Client)
	if err != nil {
		return err
	}
	failOpen := after.Sum("apiserver_admission_webhook_fail_open_count", harness.Labels{"name": mutatingHook})

	// The tables.
	s.printf("## Scale (`make scale`), %s, %d CPUs (%s)\n\n", time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), host)
	s.printf("serve settings: %s (plus its own token of the chart's ServiceAccount); 2 replicas behind a round-robin proxy. "+
		"Strategy of every Deployment: `%s`; pods request 10m CPU, 16Mi; nodes from Karpenter's kwok provider.\n\n", strings.Join(s.env, " "), burstStrategy)
	s.printf("| pods | Deployments | nodes | all pods Running after | machine |\n|---|---|---|---|---|\n")
	runningNote := fmt.Sprintf("%.0f s", allRunning.Seconds())
	if running < n {
		runningNote = fmt.Sprintf("**only %d Running** after %.0f s", running, allRunning.Seconds())
	}
	s.printf("| %d | %d × %d | %d | %s | %d CPUs |\n\n", n, s.workloads, s.perWL, len(nodes.Items), runningNote, runtime.NumCPU())
	s.printf("### Each webhook replica at full size\n\n")
	s.printReplicas(figs, true)
	s.printf("\nLive heap: go_gc_heap_live_bytes after `/debug/pprof/heap?gc=1` forced a collection; heap in use: go_memstats_heap_inuse_bytes then; RSS from /proc/PID/status. "+
		"Per cached pod: (live heap at full size − with no pod) / %d Running pods. CPU: utime+stime from /proc/PID/stat over 60 s with nothing changing; "+
		"the whole machine used %.2f cores then (API server %.2f, etcd %.2f, Karpenter %.2f, kwok %.2f). "+
		"API requests: the API server's audit log entries of the chart's ServiceAccount in the same 60 s, told apart by each replica's token id "+
		"(the convergence loop's requests, by its own user agent, are marked \"converge:\" in the table below; leader election is the webhook client's).\n\n",
		running, sumValues(machine)/steadyWindow.Seconds(), machine["API server"]/steadyWindow.Seconds(), machine["etcd"]/steadyWindow.Seconds(),
		machine["Karpenter"]/steadyWindow.Seconds(), machine["kwok"]/steadyWindow.Seconds())
	s.printf("API requests at steady state by verb and resource (60 s):\n\n| replica | requests |\n|---|---|\n")
	for i, r := range s.replicas {
		s.printf("| %s | %s |\n", r.Name, formatCounts(figs[i].reqsBy))
	}
	s.printf("\n### Admission while %d Deployments scale up and down (%s)\n\n", churn.deployments, churn.what)
	s.printf("| admissions | p50 at the API server | p99 at the API server | failed open |\n|---|---|---|---|\n")
	s.printf("| %.0f | %s | %s | %.0f |\n\n", churn.apiserver.Count(), churn.apiserver.FormatQuantile(0.5), churn.apiserver.FormatQuantile(0.99), churn.failOpen)
	s.printf("From apiserver_admission_webhook_admission_duration_seconds (the mutating webhook) and, per replica above, serve's custom_kube_scheduler_webhook_admission_duration_seconds, deltas over the churn; quantiles interpolated within their buckets.\n\n")
	s.printf("### Capacity loss: NodePool %s blocked (limits cpu 0, its nodes cordoned), %d probe Deployments × %d pods created with `%s`\n\n",
		probePool, envInt("SCALE_PROBE_WORKLOADS", 5), envInt("SCALE_PROBE_REPLICAS", 20), probeStrategy)
	s.printf("| cluster | pods besides the probe | probe pods of the lost term | until all probe pods Running elsewhere | on the fallback | ratio to the small cluster |\n|---|---|---|---|---|---|\n")
	s.printf("| small | 0 | %d | %s | %d | 1 |\n", small.lost, fmtSecs(small.took, small.err), small.fallback)
	ratio := "n/a"
	if full.err == "" && small.err == "" && small.took > 0 {
		ratio = fmt.Sprintf("**%.2f**", full.took.Seconds()/small.took.Seconds())
	}
	s.printf("| full | %d | %d | %s | %d | %s |\n\n", running, full.lost, fmtSecs(full.took, full.err), full.fallback, ratio)
	s.printf("FALLBACK_AFTER=%s, FALLBACK_COOLDOWN=%s (unless SCALE_SERVE_ENV says otherwise). "+
		"Measured from the NodePool's block until every probe pod is Running on the on-demand fallback and none is left on the lost term; "+
		"the loop marks the term sooner than FALLBACK_AFTER when Karpenter says the NodePool cannot launch (here: its limits).\n\n", scaleFallbackAfter, scaleFallbackCooldown)
	s.printf("### What the product did during the run\n\n")
	s.printf("| phase | terms marked unavailable | evictions by the convergence loop |\n|---|---|---|\n")
	for _, p := range phases {
		s.printf("| %s | %s | %.0f |\n", p.name, p.delta.formatMarks(), p.delta.evictions)
	}
	s.printf("\nFrom the replicas' custom_kube_scheduler_webhook_terms_marked_unavailable_total (by term) and converge_evictions_total, summed over both. "+
		"Pods deleted while the %d were created (evictions, fallbacks), seen by a watch: %d. Admissions failed open over the whole run: %.0f.\n\n", n, deleted, failOpen)
	s.printNotes()
	return nil
}

// printNotes prints the run's notes, if any.
func (s *scale) printNotes() {
	if len(s.notes) == 0 {
		return
	}
	s.printf("Notes:\n\n")
	for _, nt := range s.notes {
		s.printf("- %s\n", nt)
	}
	s.printf("\n")
}

// emptyMemory records each replica's live heap with no pod, the baseline of the bytes
// per cached pod.
func (s *scale) emptyMemory(ctx context.Context) error {
	waitQuiet(ctx, time.Minute)
	for _, r := range s.replicas {
		m, err := s.forcedMemory(ctx, r)
		if err != nil {
			return err
		}
		s.emptyLive = append(s.emptyLive, m.live)
		s.logf("%s empty: live heap %s, heap in use %s, RSS %s", r.Name, mib(m.live), mib(m.inuse), mib(m.rss))
	}
	return nil
}

// fullMemory fills each replica's memory with running pods placed, and its role.
func (s *scale) fullMemory(ctx context.Context, figs []replicaFigures, running int) error {
	for i, r := range s.replicas {
		m, err := s.forcedMemory(ctx, r)
		if err != nil {
			return err
		}
		figs[i].live, figs[i].inuse, figs[i].rss = m.live, m.inuse, m.rss
		figs[i].perPod = (m.live - s.emptyLive[i]) / float64(running)
		s.logf("%s full: live heap %s, heap in use %s, RSS %s, %.0f B per cached pod", r.Name, mib(m.live), mib(m.inuse), mib(m.rss), figs[i].perPod)
	}
	for i, r := range s.replicas {
		figs[i].role = s.role(ctx, r)
	}
	return nil
}

// steadyState fills each replica's CPU and API requests per second over 60 s with
// nothing changing, once the machine is quiet; it returns the whole machine's CPU
// seconds by process in that window.
func (s *scale) steadyState(ctx context.Context, figs []replicaFigures) (map[string]float64, error) {
	waitQuiet(ctx, time.Minute)
	cpuBefore := make([]float64, len(s.replicas))
	for i, r := range s.replicas {
		cpuBefore[i] = procCPUSeconds(r.PID())
	}
	machineBefore := cpuSeconds()
	from := time.Now()
	time.Sleep(steadyWindow)
	to := time.Now()
	machine := cpuSince(machineBefore)
	for i, r := range s.replicas {
		figs[i].cpu = (procCPUSeconds(r.PID()) - cpuBefore[i]) / steadyWindow.Seconds()
	}
	time.Sleep(2 * time.Second) // the audit log's last entries of the window
	counts, other, err := s.auditCounts(from, to)
	if err != nil {
		return nil, err
	}
	for i := range s.replicas {
		total := 0
		for _, v := range counts[i] {
			total += v
		}
		figs[i].reqs = float64(total) / to.Sub(from).Seconds()
		figs[i].reqsBy = counts[i]
	}
	if other > 0 {
		s.note("%d requests of the webhook's identity in the steady window carried neither replica's token id", other)
	}
	return machine, nil
}

// steadyWindow is how long steadyState measures.
const steadyWindow = 60 * time.Second

// restartEach restarts each replica in turn (SIGTERM, start again) once the machine is
// quiet, and fills its time to ready and its peak RSS 20 s after ready.
func (s *scale) restartEach(ctx context.Context, figs []replicaFigures) error {
	for i, r := range s.replicas {
		waitQuiet(ctx, time.Minute)
		if _, err := r.Terminate(30 * time.Second); err != nil {
			s.note("%s: %v", r.Name, err)
		}
		start := time.Now()
		readyAt := s.watchReady(ctx, r)
		if err := r.Start(ctx); err != nil {
			figs[i].restartErr = err.Error()
			s.note("%s did not become ready after the restart: %v", r.Name, err)
			if err := r.Start(ctx); err != nil {
				return err
			}
			continue
		}
		figs[i].ready = readyAt().Sub(start)
		time.Sleep(20 * time.Second)
		figs[i].hwm = procStatusBytes(r.PID(), "VmHWM")
		s.logf("%s restarted: ready after %s, peak RSS %s", r.Name, figs[i].ready.Round(10*time.Millisecond), mib(figs[i].hwm))
	}
	return nil
}

// printReplicas prints the table of each replica's figures, with the admission latency
// under churn when churned.
func (s *scale) printReplicas(figs []replicaFigures, churned bool) {
	head, rule := "", ""
	if churned {
		head, rule = " admission p50 / p99 under churn (serve's own) |", "---|"
	}
	s.printf("| replica | live heap / heap in use (after a forced GC) | RSS (VmRSS) | live heap per cached pod | time to ready after a restart | peak RSS in the restart (VmHWM at ready + 20 s) | below the 256 Mi limit | CPU at steady state (60 s) | API requests/s at steady state (audit log) |%s\n|---|---|---|---|---|---|---|---|---|%s\n", head, rule)
	for i, r := range s.replicas {
		f := figs[i]
		ready, hwm, below := fmt.Sprintf("%.2f s", f.ready.Seconds()), mib(f.hwm), yesNo(f.hwm < chartMemoryLimit)
		if f.restartErr != "" {
			ready, hwm, below = "not ready: "+f.restartErr, "n/a", "n/a"
		}
		latency := ""
		if churned {
			latency = fmt.Sprintf(" %s / %s |", fmtMs(f.served, 0.5), fmtMs(f.served, 0.99))
		}
		s.printf("| %s (%s) | %s / %s | %s | %.0f B (%.2f KiB) | %s | %s | %s | %.4f cores | %.2f |%s\n",
			r.Name, f.role, mib(f.live), mib(f.inuse), mib(f.rss), f.perPod, f.perPod/1024, ready, hwm, below,
			f.cpu, f.reqs, latency)
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "**no**"
}

func fmtMs(h harness.Histogram, q float64) string {
	if h.Count() == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f ms", h.Quantile(q)*1000)
}

func fmtSecs(d time.Duration, err string) string {
	if err != "" {
		return "**" + err + "**"
	}
	return fmt.Sprintf("%.0f s", d.Seconds())
}

func formatCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// role names what a replica does: the convergence leader runs the loop.
func (s *scale) role(ctx context.Context, r *harness.Serve) string {
	ms, err := r.Metrics(ctx)
	if err != nil {
		return "?"
	}
	if ms.Sum(convergeLeader, nil) > 0 {
		return "convergence leader"
	}
	return "admission only"
}

type forcedSample struct{ live, inuse, rss float64 }

// forcedMemory forces a collection (/debug/pprof/heap?gc=1, serve with PROFILING=on),
// then reads the live heap and heap in use from /metrics and RSS from /proc.
func (s *scale) forcedMemory(ctx context.Context, r *harness.Serve) (forcedSample, error) {
	tmp := filepath.Join(s.t.TempDir(), "heap.pb.gz")
	if err := r.SaveProfile(ctx, "heap", "gc=1", tmp); err != nil {
		return forcedSample{}, err
	}
	_ = os.Remove(tmp)
	ms, err := r.Metrics(ctx)
	if err != nil {
		return forcedSample{}, err
	}
	return forcedSample{
		live:  ms.Sum("go_gc_heap_live_bytes", nil),
		inuse: ms.Sum("go_memstats_heap_inuse_bytes", nil),
		rss:   procStatusBytes(r.PID(), "VmRSS"),
	}, nil
}

// procStatusBytes reads a "kB" field of /proc/PID/status in bytes (NaN if unreadable).
func procStatusBytes(pid int, field string) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return math.NaN()
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseFloat(f[0], 64)
				return kb * 1024
			}
		}
	}
	return math.NaN()
}

// procCPUSeconds is a process's utime+stime so far.
func procCPUSeconds(pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return math.NaN()
	}
	st := string(raw)
	fields := strings.Fields(st[strings.LastIndexByte(st, ')')+1:])
	u, _ := strconv.ParseFloat(fields[11], 64)
	k, _ := strconv.ParseFloat(fields[12], 64)
	return (u + k) / userHZ
}

// auditCounts counts the webhook identity's requests received in [from, to) in the
// API server's audit log, per replica (by token id) and by verb and resource (the
// convergence loop's prefixed "converge: "); other
// is those carrying no known token id.
func (s *scale) auditCounts(from, to time.Time) ([]map[string]int, int, error) {
	f, err := os.Open(s.auditPath)
	if err != nil {
		return nil, 0, fmt.Errorf("the audit log: %w", err)
	}
	defer f.Close()
	out := make([]map[string]int, len(s.jti))
	for i := range out {
		out[i] = map[string]int{}
	}
	other := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct {
			Stage string `json:"stage"`
			Verb  string `json:"verb"`
			User  struct {
				Username string              `json:"username"`
				Extra    map[string][]string `json:"extra"`
			} `json:"user"`
			ObjectRef struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
			} `json:"objectRef"`
			Received  time.Time `json:"requestReceivedTimestamp"`
			UserAgent string    `json:"userAgent"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue
		}
		if ev.Received.Before(from) || !ev.Received.Before(to) || ev.Stage != "ResponseComplete" && ev.Stage != "Panic" {
			continue
		}
		key := ev.Verb + " " + ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			key += "/" + ev.ObjectRef.Subresource
		}
		// The convergence loop's client says so in its user agent.
		if strings.HasSuffix(ev.UserAgent, "/converge") {
			key = "converge: " + key
		}
		idx := -1
		for _, id := range ev.User.Extra["authentication.kubernetes.io/credential-id"] {
			for i, j := range s.jti {
				if id == "JTI="+j {
					idx = i
				}
			}
		}
		if idx < 0 {
			other++
			continue
		}
		out[idx][key]++
	}
	return out, other, sc.Err()
}

// scaleUp creates the workloads and watches their pods until n are Running (or
// SCALE_RUNNING_TIMEOUT passes); it returns how many were Running, how many pods were
// deleted on the way, and the time.
func (s *scale) scaleUp(ctx context.Context, n int) (running, deleted int, took time.Duration, err error) {
	pods := s.pods.CoreV1().Pods(scaleNS)
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, 0, err
	}
	if len(list.Items) > 0 {
		return 0, 0, 0, fmt.Errorf("%d pods in %s before the run", len(list.Items), scaleNS)
	}
	start := time.Now()
	var created atomic.Int64
	var g errgroup.Group
	g.SetLimit(8)
	for i := range s.workloads {
		g.Go(func() error {
			d := deployment(scaleNS, fmt.Sprintf("wl-%03d", i+1), burstStrategy, s.perWL)
			if _, err := s.c.Client.AppsV1().Deployments(scaleNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating %s: %w", d.Name, err)
			}
			created.Add(1)
			return nil
		})
	}
	createErr := make(chan error, 1)
	go func() { createErr <- g.Wait() }()
	running, deleted = s.awaitRunning(ctx, scaleNS, list.ResourceVersion, n, func() string {
		return fmt.Sprintf("%d Deployments created", created.Load())
	})
	took = time.Since(start)
	if err := <-createErr; err != nil {
		return 0, 0, 0, err
	}
	return running, deleted, took, nil
}

// awaitRunning watches the pods of ns from resource version rv until n of them are
// Running, or SCALE_RUNNING_TIMEOUT (minutes, default 45) has passed (a note says so),
// logging progress (what, and the counts) every 30 s. It returns the pods Running and
// those deleted on the way.
func (s *scale) awaitRunning(ctx context.Context, ns, rv string, n int, what func() string) (running, deleted int) {
	pods := s.pods.CoreV1().Pods(ns)
	timeout := time.Duration(envInt("SCALE_RUNNING_TIMEOUT", 45)) * time.Minute
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	run := map[string]bool{}
	exist := map[string]bool{}
	lastLog := time.Now()
	for wctx.Err() == nil {
		w, err := pods.Watch(wctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if wctx.Err() == nil {
				s.logf("watching pods of %s: %v", ns, err)
				time.Sleep(time.Second)
			}
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				// Most likely the resource version is too old to watch from: count
				// again from a list.
				if rv, err = s.countPods(wctx, ns, exist, run); err != nil {
					s.logf("listing pods of %s: %v", ns, err)
					time.Sleep(time.Second)
				}
				break
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			rv = p.ResourceVersion
			switch ev.Type {
			case watch.Added, watch.Modified:
				exist[p.Name] = true
				if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
					run[p.Name] = true
				} else {
					delete(run, p.Name)
				}
			case watch.Deleted:
				delete(exist, p.Name)
				delete(run, p.Name)
				deleted++
			}
			if time.Since(lastLog) > 30*time.Second {
				lastLog = time.Now()
				s.logf("%s: %s, %d pods exist, %d Running after %s", ns, what(), len(exist), len(run), time.Since(start).Round(time.Second))
			}
			if len(run) >= n {
				w.Stop()
				return len(run), deleted
			}
		}
		w.Stop()
	}
	s.note("only %d of %d pods Running after %s (SCALE_RUNNING_TIMEOUT): the run goes on at that size", len(run), n, timeout)
	return len(run), deleted
}

// countPods fills exist and run (emptied first) from a list of the pods of ns, and
// returns the list's resource version.
func (s *scale) countPods(ctx context.Context, ns string, exist, run map[string]bool) (string, error) {
	list, err := s.pods.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	clear(exist)
	clear(run)
	for _, p := range list.Items {
		exist[p.Name] = true
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			run[p.Name] = true
		}
	}
	return list.ResourceVersion, nil
}

// churnResult is the admission latency while Deployments scale up and down.
type churnResult struct {
	deployments int
	what        string
	apiserver   harness.Histogram
	failOpen    float64
}

// churn scales SCALE_CHURN_DEPLOYMENTS of the workloads up by a fifth and back down,
// every 10 s, for SCALE_CHURN_SECONDS, and takes the admission histograms' deltas.
func (s *scale) churn(ctx context.Context, figs []replicaFigures) (churnResult, error) {
	k := min(envInt("SCALE_CHURN_DEPLOYMENTS", 20), s.workloads)
	dur := time.Duration(envInt("SCALE_CHURN_SECONDS", 120)) * time.Second
	up := s.perWL + max(1, s.perWL/5)
	res := churnResult{deployments: k, what: fmt.Sprintf("%d ↔ %d replicas every 10 s for %s", s.perWL, up, dur)}
	sel := harness.Labels{"name": mutatingHook}
	before, err := harness.APIServerMetrics(ctx, s.c.Client)
	if err != nil {
		return res, err
	}
	served := make([]harness.Histogram, len(s.replicas))
	for i, r := range s.replicas {
		ms, err := r.Metrics(ctx)
		if err != nil {
			return res, err
		}
		served[i] = ms.Histogram("custom_kube_scheduler_webhook_admission_duration_seconds", harness.Labels{"webhook": "mutate"})
	}
	setAll := func(replicas int) error {
		var g errgroup.Group
		for i := range k {
			g.Go(func() error {
				name := fmt.Sprintf("wl-%03d", i+1)
				patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
				_, err := s.c.Client.AppsV1().Deployments(scaleNS).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
				return err
			})
		}
		return g.Wait()
	}
	s.logf("churn: %s", res.what)
	end := time.Now().Add(dur)
	for up2 := true; time.Now().Before(end); up2 = !up2 {
		target := s.perWL
		if up2 {
			target = up
		}
		if err := setAll(target); err != nil {
			return res, fmt.Errorf("scaling: %w", err)
		}
		time.Sleep(10 * time.Second)
	}
	if err := setAll(s.perWL); err != nil {
		return res, err
	}
	time.Sleep(10 * time.Second)
	after, err := harness.APIServerMetrics(ctx, s.c.Client)
	if err != nil {
		return res, err
	}
	res.apiserver = after.Histogram("apiserver_admission_webhook_admission_duration_seconds", sel).
		Sub(before.Histogram("apiserver_admission_webhook_admission_duration_seconds", sel))
	res.failOpen = after.Sum("apiserver_admission_webhook_fail_open_count", sel) - before.Sum("apiserver_admission_webhook_fail_open_count", sel)
	for i, r := range s.replicas {
		ms, err := r.Metrics(ctx)
		if err != nil {
			return res, err
		}
		figs[i].served = ms.Histogram("custom_kube_scheduler_webhook_admission_duration_seconds", harness.Labels{"webhook": "mutate"}).Sub(served[i])
	}
	s.logf("churn: %.0f admissions, p50 %s, p99 %s", res.apiserver.Count(), res.apiserver.FormatQuantile(0.5), res.apiserver.FormatQuantile(0.99))
	return res, nil
}

// probeResult is one capacity-loss measurement.
type probeResult struct {
	lost, fallback int
	took           time.Duration
	err            string
}

// capacityLoss blocks the probe's spot NodePool (limits cpu 0) and cordons its nodes,
// as the e2e tests block capacity, then creates the probe Deployments and times until
// all their pods are Running; then lifts the block and deletes the probes.
func (s *scale) capacityLoss(ctx context.Context, label string) (probeResult, error) {
	var res probeResult
	k, r := envInt("SCALE_PROBE_WORKLOADS", 5), envInt("SCALE_PROBE_REPLICAS", 20)
	np := s.dyn.Resource(nodePoolGVR)
	pool, err := np.Get(ctx, probePool, metav1.GetOptions{})
	if err != nil {
		return res, fmt.Errorf("reading NodePool %s: %w", probePool, err)
	}
	oldLimits, _, _ := unstructuredField(pool.Object, "spec", "limits")
	cordon := func(on bool) error {
		list, err := s.c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: probeNodes})
		if err != nil {
			return err
		}
		for _, n := range list.Items {
			body := fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)
			if _, err := s.c.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		return nil
	}
	lost := time.Now()
	if _, err := np.Patch(ctx, probePool, types.MergePatchType, []byte(`{"spec":{"limits":{"cpu":"0"}}}`), metav1.PatchOptions{}); err != nil {
		return res, fmt.Errorf("blocking NodePool %s: %w", probePool, err)
	}
	var once sync.Once
	unblock := func() {
		once.Do(func() {
			restore := []byte(`{"spec":{"limits":null}}`)
			if oldLimits != nil {
				b, _ := json.Marshal(map[string]any{"spec": map[string]any{"limits": oldLimits}})
				restore = b
			}
			if _, err := np.Patch(ctx, probePool, types.MergePatchType, restore, metav1.PatchOptions{}); err != nil {
				s.note("unblocking NodePool %s: %v", probePool, err)
			}
			if err := cordon(false); err != nil {
				s.note("uncordoning: %v", err)
			}
		})
	}
	defer unblock()
	if err := cordon(true); err != nil {
		return res, fmt.Errorf("cordoning: %w", err)
	}
	var names []string
	for i := range k {
		d := deployment(probeNS, fmt.Sprintf("probe-%s-%d", label, i+1), probeStrategy, r)
		names = append(names, d.Name)
		if _, err := s.c.Client.AppsV1().Deployments(probeNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			return res, fmt.Errorf("creating %s: %w", d.Name, err)
		}
	}
	want := k * r
	limit := 10 * time.Minute
	var state string
	err = wait.PollUntilContextTimeout(ctx, time.Second, limit, true, func(ctx context.Context) (bool, error) {
		list, err := s.c.Client.CoreV1().Pods(probeNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		running, fallback, onLost := 0, 0, 0
		for _, p := range list.Items {
			if !strings.HasPrefix(p.Name, "probe-"+label+"-") || p.DeletionTimestamp != nil {
				continue
			}
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
			if p.Spec.NodeSelector["nodesize"] == "spot4vcpu16gb" {
				onLost++
			} else if p.Annotations[strategy.AnnotationFallbackFrom] != "" {
				fallback++
			}
		}
		res.fallback = fallback
		state = fmt.Sprintf("%d of %d probe pods Running, %d on the lost term, %d on the fallback", running, want, onLost, fallback)
		return running == want && onLost == 0, nil
	})
	res.took = time.Since(lost)
	if err != nil {
		res.err = fmt.Sprintf("not all Running within %s: %s", limit, state)
	}
	s.logf("capacity loss (%s): %s after %s", label, state, res.took.Round(time.Second))
	// The probe's seats on the lost term (its pods before fallback).
	if st, err := strategy.Parse(probeStrategy); err == nil {
		res.lost = k * st.Target(r)[1]
	}
	unblock()
	bg := metav1.DeletePropagationBackground
	for _, name := range names {
		if err := s.c.Client.AppsV1().Deployments(probeNS).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
			s.note("deleting %s: %v", name, err)
		}
	}
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := s.c.Client.CoreV1().Pods(probeNS).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, nil
	})
	return res, nil
}

func unstructuredField(obj map[string]any, path ...string) (any, bool, error) {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, nil
		}
		if cur, ok = m[p]; !ok {
			return nil, false, nil
		}
	}
	return cur, true, nil
}
