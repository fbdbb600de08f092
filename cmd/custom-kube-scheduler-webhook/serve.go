package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/bombsimon/logrusr/v4"
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/selfcert"
)

const component = "custom-kube-scheduler-webhook"

func newServeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the admission webhook (HTTPS: /mutate, /validate, /healthz, /readyz, /metrics)",
		Long: `Run the admission webhook. Every setting is read from its environment variable
and can be overridden by its flag.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadServeConfig(cmd.Flags())
			if err != nil {
				return usageError("%w", err)
			}
			log := logrus.New()
			log.SetFormatter(&logrus.JSONFormatter{})
			log.SetOutput(os.Stderr)
			log.SetLevel(cfg.LogLevel)
			// client-go (klog) and controller-runtime (certwatcher, cert-controller) log
			// through logr: send both to the same JSON log.
			klog.SetLogger(logrusr.New(log.WithField("component", "client-go")))
			ctrllog.SetLogger(logrusr.New(log.WithField("component", "controller-runtime")))
			return serve(cmd.Context(), cfg, log)
		},
	}
	addSettingFlags(cmd.Flags(), serveSettings)
	return cmd
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
	return cfg, nil
}

func serve(ctx context.Context, cfg *serveConfig, log *logrus.Logger) error {
	restCfg, err := restConfig(cfg.Kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("create Kubernetes client: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	if cfg.SelfCert {
		if err := startSelfCert(ctx, cfg, restCfg, log); err != nil {
			return err
		}
	}
	certs, err := certwatcher.New(cfg.TLSCertFile, cfg.TLSKeyFile)
	if err != nil {
		return fmt.Errorf("load serving certificate: %w", err)
	}
	go func() {
		if err := certs.Start(ctx); err != nil {
			log.WithError(err).Error("certificate watcher stopped")
		}
	}()

	caches, err := webhook.NewCaches(client, 10*time.Minute)
	if err != nil {
		return err
	}
	caches.Start(ctx)
	catalog, groups, err := newCatalog(ctx, cfg, restCfg, client, log)
	if err != nil {
		return err
	}
	go catalog.Run(ctx)
	ledger, ledgerSynced, err := newLedger(ctx, cfg, restCfg, caches, log)
	if err != nil {
		return err
	}
	synced := make(chan struct{})
	go func() {
		if err := caches.WaitForSync(ctx); err != nil {
			log.WithError(err).Error("caches did not sync")
			return
		}
		if !cache.WaitForCacheSync(ctx.Done(), catalog.HasSynced, ledgerSynced) {
			log.Error("NodePool, node group, node and seat lease views did not sync")
			return
		}
		close(synced)
		log.Info("caches synced; ready")
	}()

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component})

	metrics := webhook.NewMetrics()
	if groups != nil {
		if err := registerNodeGroupMetrics(metrics.Registry, groups.Status); err != nil {
			return err
		}
	}
	entry := log.WithField("component", component)
	capacity := catalogCapacity{catalog}
	mutator := &webhook.PodMutator{
		Resolver:   caches.Resolver,
		Capacity:   capacity,
		Ledger:     ledger,
		Recorder:   recorder,
		Metrics:    metrics,
		Namespaces: webhook.NamespaceFilter{Blocklist: cfg.Blocklist, Own: cfg.Namespace},
		Synced:     synced,
		Deadline:   cfg.AdmissionDeadline,
		Log:        entry,
	}
	validator := &webhook.WorkloadValidator{Capacity: capacity, WarnOnly: cfg.WarnOnly, Metrics: metrics, Log: entry}
	handlers := &webhook.Handlers{
		Mutate:   mutator.Admit,
		Validate: validator.Admit,
		Ready: func() error {
			select {
			case <-synced:
				return nil
			default:
				return errors.New("caches not synced yet")
			}
		},
		Metrics: metrics,
		Log:     entry,
	}
	ln, err := net.Listen("tcp", cfg.ListenAddress)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.ListenAddress, err)
	}
	entry.WithFields(logrus.Fields{"blocklist": keys(cfg.Blocklist), "namespace": cfg.Namespace}).Info("starting")
	return webhook.Serve(ctx, ln, handlers.Mux(), certs.GetCertificate, entry)
}

// startSelfCert bootstraps (or loads) the CA and serving certificate kept in a Secret,
// writes them where the certificate watcher reads them, keeps the webhook
// configurations' caBundle current and rotates; it returns once the files exist.
func startSelfCert(ctx context.Context, cfg *serveConfig, restCfg *rest.Config, log *logrus.Logger) error {
	if filepath.Dir(cfg.TLSCertFile) != filepath.Dir(cfg.TLSKeyFile) {
		return usageError("CERT_MODE=self writes the certificate and key into one directory: TLS_CERT_FILE and TLS_KEY_FILE must share it")
	}
	ready, err := selfcert.Start(ctx, selfcert.Config{
		Namespace: cfg.Namespace, SecretName: cfg.CertSecretName, ServiceName: cfg.ServiceName,
		CertDir: filepath.Dir(cfg.TLSCertFile), CertName: filepath.Base(cfg.TLSCertFile), KeyName: filepath.Base(cfg.TLSKeyFile),
		MutatingWebhookName: cfg.MutatingConfig, ValidatingWebhookName: cfg.ValidatingConfig,
	}, restCfg, log.WithField("component", "selfcert"))
	if err != nil {
		return fmt.Errorf("self-managed certificates: %w", err)
	}
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for self-managed certificates: %w", ctx.Err())
	}
}

// newLedger returns the seat ledger LEDGER asks for, and what its readiness waits on.
func newLedger(ctx context.Context, cfg *serveConfig, restCfg *rest.Config, caches *webhook.Caches, log *logrus.Logger) (webhook.Ledger, cache.InformerSynced, error) {
	if !cfg.LeaseLedger {
		return webhook.NewMemoryLedger(caches, cfg.ReservationTTL), func() bool { return true }, nil
	}
	// The ledger writes at most one Lease create and one delete per pod the API server
	// is itself creating, on the admission's critical path: a client-side limit would
	// only queue claims past the webhook timeout (pods then admitted unplaced). The API
	// server's priority and fairness protects it instead.
	ledgerCfg := rest.CopyConfig(restCfg)
	ledgerCfg.QPS = -1
	ledgerClient, err := kubernetes.NewForConfig(ledgerCfg)
	if err != nil {
		return nil, nil, fmt.Errorf("create ledger client: %w", err)
	}
	ledger, err := webhook.NewLeaseLedger(ledgerClient, cfg.Namespace, caches, cfg.ReservationTTL, log.WithField("component", "ledger"))
	if err != nil {
		return nil, nil, err
	}
	visible := func(pod *corev1.Pod) { ledger.PodVisible(ctx, pod) }
	gone := func(pod *corev1.Pod) { ledger.PodGone(ctx, pod) }
	if err := caches.OnPlacedPods(visible, gone); err != nil {
		return nil, nil, err
	}
	ledger.Start(ctx)
	return ledger, ledger.HasSynced, nil
}

// newCatalog watches NodePools and Ready nodes and, when a cluster name is configured,
// lists the cluster's EKS managed node groups.
func newCatalog(ctx context.Context, cfg *serveConfig, restCfg *rest.Config, client kubernetes.Interface, log *logrus.Logger) (*karpenter.Catalog, *nodegroups.Cache, error) {
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return nil, nil, fmt.Errorf("create dynamic client: %w", err)
	}
	var groups *nodegroups.Cache
	opts := karpenter.Options{Kube: client, Dynamic: dyn, Log: log.WithField("component", "catalog")}
	if cfg.EKSClusterName != "" {
		eks, err := nodegroups.NewClient(ctx, nodegroups.ClientOptions{})
		if err != nil {
			return nil, nil, fmt.Errorf("EKS node groups of %s: %w", cfg.EKSClusterName, err)
		}
		if groups, err = nodegroups.New(eks, nodegroups.Config{ClusterName: cfg.EKSClusterName, Interval: cfg.NodeGroupRefresh, Log: log.WithField("component", "nodegroups")}); err != nil {
			return nil, nil, fmt.Errorf("EKS node groups of %s: %w", cfg.EKSClusterName, err)
		}
		opts.NodeGroups = groups
	}
	catalog, err := karpenter.NewCatalog(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("create capacity catalog: %w", err)
	}
	return catalog, groups, nil
}

// catalogCapacity adapts the catalog to what the admission handlers ask.
type catalogCapacity struct{ catalog *karpenter.Catalog }

func (c catalogCapacity) Tolerations(labels map[string]string) ([]corev1.Toleration, bool) {
	sources := c.catalog.Serving(labels)
	return karpenter.TolerationsFor(sources), len(sources) > 0
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
