package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/bombsimon/logrusr/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/converge"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/imagearch"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/clientmetrics"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/interruption"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/ledger"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
)

const component = "custom-kube-scheduler-webhook"

func newServeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the admission webhook (HTTPS: /mutate, /validate; HTTP: /metrics, /healthz, /readyz)",
		Long: `Run the admission webhook. Every setting is read from its environment variable
and can be overridden by its flag (--converge alone means on; other values need a
value: --converge=off, --reservation-ttl 45s).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := newServeLogger(cmd.ErrOrStderr())
			cfg, err := loadServeConfig(cmd.Flags())
			if err != nil {
				// Before the level is known, still in the log's format: a log pipeline
				// that parses JSON sees why the webhook did not start.
				log.WithError(err).Error("invalid settings")
				return &exitError{code: 2, err: err, logged: true}
			}
			log.SetLevel(cfg.LogLevel)
			// client-go (klog) and controller-runtime (certwatcher, cert-controller) log
			// through logr: send both to the same JSON log.
			klog.SetLogger(logrusr.New(log.WithField("component", "client-go")))
			ctrllog.SetLogger(logrusr.New(log.WithField("component", "controller-runtime")))
			if err := serve(cmd.Context(), cfg, log); err != nil {
				log.WithError(err).Error("serve stopped")
				return &exitError{code: 1, err: err, logged: true}
			}
			return nil
		},
	}
	addSettingFlags(cmd.Flags(), serveSettings)
	addRetiredFlags(cmd.Flags())
	cmd.SetHelpFunc(groupedHelp)
	// A bad flag too is logged in serve's format.
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		newServeLogger(c.ErrOrStderr()).WithError(err).Error("invalid settings")
		return &exitError{code: 2, err: err, logged: true}
	})
	return cmd
}

// newServeLogger is serve's JSON log, with timestamps to the nanosecond (RFC 3339):
// admissions, seat claims and the loop's passes happen many times a second, and a log
// store orders lines within a second only by them.
func newServeLogger(w io.Writer) *logrus.Logger {
	log := logrus.New()
	log.SetFormatter(&logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano})
	log.SetOutput(w)
	return log
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		// Like kubectl, KUBECONFIG may list several files.
		rules := &clientcmd.ClientConfigLoadingRules{Precedence: filepath.SplitList(kubeconfig)}
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("load Kubernetes client configuration: %w", err)
	}
	// Admission bursts trigger live lookups of new ReplicaSets; the defaults (5/10) are
	// too tight for that.
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = component
	// Built-in types travel as protobuf, as the control plane's own components ask for
	// them: a pod watch event decodes several times faster than from JSON, and the API
	// server sends every pod watcher the protobuf it already encoded for the scheduler
	// and controllers instead of encoding each event once more as JSON. Custom
	// resources (NodePools) have no protobuf form: the dynamic client asks for JSON.
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return cfg, nil
}

// cacheGrace is how long an admission waits for the informer to show an unknown owner
// before a live lookup: a real ReplicaSet shows up within milliseconds.
const cacheGrace = 250 * time.Millisecond

// serve runs the webhook until stop ends, then drains (see webhook.Drain).
func serve(stop context.Context, cfg *serveConfig, log *logrus.Logger) error {
	r, err := newReplica(cfg, log)
	if err != nil {
		return err
	}
	// The stop signal starts the drain; the caches, the ledger and the certificate watcher
	// keep running on ctx until the server has stopped, or stop at once if it never started.
	ctx, cancel, start := lifetime(stop)
	defer cancel()
	collectOftenUntilSynced(ctx, r.synced)
	if err := r.startViews(ctx); err != nil {
		return err
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: r.client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	jobs := leaderJobs{recorder: broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})}
	r.newHandlers(jobs.recorder)
	costs := report.NewCostMetrics(webhook.MetricsNamespace)
	sources := metricSources{REST: r.restMetrics, Ledger: r.seats, Certificate: r.certs.GetCertificate, Ready: r.handlers.Ready, Cost: costs, Images: r.images}
	if r.groups != nil {
		sources.NodeGroups = r.groups.Status
	}
	if jobs.metrics, err = registerMetrics(r.metrics.Registry, sources); err != nil {
		return err
	}
	if jobs.costs, err = report.NewCostRefresher(cfg.Cost, r.restCfg, report.Views{Caches: r.caches, Policies: r.policies, Records: r.records, Synced: r.synced,
		Skip: func(ns string) bool { return cfg.Namespaces.Skip(ns) || !r.scope.CoversNamespace(ns) }, OnDemandAcceptsReserved: cfg.Admission.OnDemandAcceptsReserved}, costs, log); err != nil {
		return err
	}
	if jobs.signals, err = interruption.NewSignals(ctx, cfg.Interruption, interruption.NodesOf(r.catalog), r.metrics.Registry, webhook.MetricsNamespace, log.WithField("component", "interruption")); err != nil {
		return err
	}
	elected, err := r.startConverge(ctx, jobs)
	if err != nil {
		return err
	}
	err = r.run(ctx, stop, start)
	cancel()
	// The leader's Lease release is one write, bounded by client-go (its renew deadline).
	<-elected
	return err
}

// lifetime returns the context serve's background parts run on: the stop signal
// cancels it at once until start reports the server started; after that only cancel
// does (once the drain is over). start reports whether the server may start (stop has
// not come yet).
func lifetime(stop context.Context) (ctx context.Context, cancel context.CancelFunc, start func() bool) {
	ctx, cancel = context.WithCancel(context.WithoutCancel(stop))
	var (
		mu      sync.Mutex
		started bool
	)
	go func() {
		<-stop.Done()
		mu.Lock()
		defer mu.Unlock()
		if !started {
			cancel()
		}
	}()
	return ctx, cancel, func() bool {
		mu.Lock()
		defer mu.Unlock()
		started = stop.Err() == nil
		return started
	}
}

// plainListeners are the metrics and health ports (nil when switched off).
type plainListeners struct {
	metrics, health net.Listener
	handlers        *webhook.Handlers
}

// listenPlain opens METRICS_ADDRESS and HEALTH_ADDRESS.
func listenPlain(cfg servingSettings, handlers *webhook.Handlers) (*plainListeners, error) {
	p := &plainListeners{handlers: handlers}
	var err error
	if cfg.MetricsAddress != "" {
		if p.metrics, err = net.Listen("tcp", cfg.MetricsAddress); err != nil {
			return nil, fmt.Errorf("listen on METRICS_ADDRESS %s: %w", cfg.MetricsAddress, err)
		}
	}
	if cfg.HealthAddress != "" {
		if p.health, err = net.Listen("tcp", cfg.HealthAddress); err != nil {
			p.close()
			return nil, fmt.Errorf("listen on HEALTH_ADDRESS %s: %w", cfg.HealthAddress, err)
		}
	}
	return p, nil
}

func (p *plainListeners) close() {
	for _, ln := range []net.Listener{p.metrics, p.health} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

// serve serves /metrics and the probes until ctx ends; the channel closes once both
// servers have stopped.
func (p *plainListeners) serve(ctx context.Context, log logrus.FieldLogger) <-chan struct{} {
	var wg sync.WaitGroup
	for _, s := range []struct {
		ln      net.Listener
		handler http.Handler
		what    string
	}{{p.metrics, p.handlers.MetricsMux(), "metrics"}, {p.health, p.handlers.HealthMux(), "health probes"}} {
		if s.ln == nil {
			continue
		}
		wg.Go(func() {
			if err := webhook.ServePlain(ctx, s.ln, s.handler, s.what, log); err != nil {
				log.WithError(err).Error("plain HTTP server stopped")
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

// metricSources are what serve's metrics beside webhook.NewMetrics' own read.
type metricSources struct {
	REST        *clientmetrics.Metrics
	Ledger      *ledger.Ledger
	Certificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	Ready       func() error
	// NodeGroups is nil without EKS_CLUSTER_NAME: no node-group metrics then.
	NodeGroups func() nodegroups.Status
	// Cost holds the realized-cost series (empty unless COST_METRICS=on refreshes it).
	Cost *report.CostMetrics
	// Images is the image architecture lookup (nil with IMAGE_ARCHITECTURES=off).
	Images *imagearch.Resolver
}

// registerMetrics registers on reg (webhook.NewMetrics' registry) every metric serve
// exports beyond webhook.NewMetrics' own, and returns the convergence loop's. The
// monitoring tests build their registry with it, as serve does.
func registerMetrics(reg prometheus.Registerer, src metricSources) (*converge.Metrics, error) {
	if err := src.REST.Register(reg); err != nil {
		return nil, err
	}
	if err := webhook.RegisterCertificateExpiry(reg, src.Certificate); err != nil {
		return nil, err
	}
	if err := reg.Register(newBuildInfoGauge(webhook.MetricsNamespace, currentBuild())); err != nil {
		return nil, fmt.Errorf("register build_info: %w", err)
	}
	if err := reg.Register(newReadyGauge(webhook.MetricsNamespace, src.Ready)); err != nil {
		return nil, fmt.Errorf("register ready: %w", err)
	}
	if err := src.Ledger.RegisterMetrics(reg, webhook.MetricsNamespace); err != nil {
		return nil, err
	}
	if src.NodeGroups != nil {
		if err := nodegroups.RegisterMetrics(reg, webhook.MetricsNamespace, src.NodeGroups); err != nil {
			return nil, err
		}
	}
	if src.Cost != nil {
		if err := reg.Register(src.Cost); err != nil {
			return nil, fmt.Errorf("register cost metrics: %w", err)
		}
	}
	if src.Images != nil {
		if err := src.Images.Register(reg); err != nil {
			return nil, err
		}
	}
	m, err := converge.NewMetrics(reg, webhook.MetricsNamespace)
	if err != nil {
		return nil, fmt.Errorf("register convergence metrics: %w", err)
	}
	return m, nil
}

// newReadyGauge is custom_kube_scheduler_webhook_ready: 1 while /readyz answers 200, so
// that an alert sees a replica that runs but is not ready.
func newReadyGauge(namespace string, ready func() error) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Name: "ready",
		Help: "1 while this replica is ready (its /readyz answers 200), else 0.",
	}, func() float64 {
		if ready() != nil {
			return 0
		}
		return 1
	})
}

// newCatalog watches NodePools and Ready nodes and, when a cluster name is configured,
// lists the cluster's EKS managed node groups.
func newCatalog(ctx context.Context, eksCluster string, restCfg *rest.Config, client kubernetes.Interface, log *logrus.Logger) (*karpenter.Catalog, *nodegroups.Cache, error) {
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return nil, nil, fmt.Errorf("create dynamic client: %w", err)
	}
	var groups *nodegroups.Cache
	opts := karpenter.Options{Kube: client, Dynamic: dyn, Log: log.WithField("component", "catalog")}
	if eksCluster != "" {
		eks, err := nodegroups.NewClient(ctx, nodegroups.ClientOptions{})
		if err != nil {
			return nil, nil, fmt.Errorf("EKS node groups of %s: %w", eksCluster, err)
		}
		if groups, err = nodegroups.New(eks, nodegroups.Config{ClusterName: eksCluster, Log: log.WithField("component", "nodegroups")}); err != nil {
			return nil, nil, fmt.Errorf("EKS node groups of %s: %w", eksCluster, err)
		}
		opts.NodeGroups = groups
	}
	catalog, err := karpenter.NewCatalog(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("create capacity catalog: %w", err)
	}
	return catalog, groups, nil
}

// replicaIdentity names this process in the Leases it holds (seat records, the
// convergence loop's election): readable by people, and unique per process start. A
// restarted container has the same hostname and PID 1, and must not pass for its
// previous process: that one's reservations since its last record write are unknown.
func replicaIdentity() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("%s_%d_%s", host, os.Getpid(), rand.Text()[:6])
}
