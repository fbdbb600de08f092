package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/imagearch"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/clientmetrics"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/ledger"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/ownership"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/unavailability"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/admissiontoken"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/peerauth"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/placement"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/validation"
)

// replica is one serve process's parts, made in the order they depend on each other.
type replica struct {
	cfg         *serveConfig
	log         *logrus.Logger
	entry       logrus.FieldLogger
	restCfg     *rest.Config
	client      kubernetes.Interface
	metrics     *webhook.Metrics
	restMetrics *clientmetrics.Metrics

	// Made by startViews.
	certs *certwatcher.CertWatcher
	door  *admissiontoken.Keeper // nil without ADMISSION_TOKEN_SECRET
	views
	identity  string
	owner     ownership.Owner
	peerTrust peerauth.Trust
	images    *imagearch.Resolver // nil with IMAGE_ARCHITECTURES=off

	// Made by newHandlers.
	handlers *webhook.Handlers
	draining atomic.Bool
}

// newReplica makes the API clients and the metrics registry.
func newReplica(cfg *serveConfig, log *logrus.Logger) (*replica, error) {
	restCfg, err := restConfig(cfg.Kube.Kubeconfig)
	if err != nil {
		return nil, err
	}
	r := &replica{cfg: cfg, log: log, entry: log.WithField("component", component), restCfg: restCfg,
		metrics: webhook.NewMetrics(), restMetrics: clientmetrics.New(), views: views{synced: make(chan struct{})}}
	// Every client is built from restCfg (or a copy): all count their requests.
	r.restMetrics.Instrument(restCfg)
	if r.client, err = kubernetes.NewForConfig(restCfg); err != nil {
		return nil, fmt.Errorf("create Kubernetes client: %w", err)
	}
	return r, nil
}

// startViews starts what admission and the loop read: the serving certificate, the
// caches, the capacity catalog, the seat ledger and the unavailability records; synced
// closes once all have synced.
func (r *replica) startViews(ctx context.Context) error {
	cfg, log := r.cfg, r.log
	if err := cfg.Certs.Await(ctx, cfg.Namespaces.Own, r.restCfg, log.WithField("component", "selfcert")); err != nil {
		return err
	}
	var err error
	if r.certs, err = certwatcher.New(cfg.Certs.CertFile, cfg.Certs.KeyFile); err != nil {
		return fmt.Errorf("load serving certificate: %w", err)
	}
	go func() {
		if err := r.certs.Start(ctx); err != nil {
			log.WithError(err).Error("certificate watcher stopped")
		}
	}()
	if err := r.startDoor(ctx); err != nil {
		return err
	}
	if err := r.startCaches(ctx); err != nil {
		return err
	}
	if r.catalog, r.groups, err = newCatalog(ctx, cfg.Kube.EKSClusterName, r.restCfg, r.client, log); err != nil {
		return err
	}
	go r.catalog.Run(ctx)
	r.identity = replicaIdentity()
	if r.owner, err = ownership.Adopt(ctx, r.client, cfg.Namespaces.Own, cfg.Kube.OwnerDeployment, log, strategy.LabelSeatRecord, strategy.LabelUnavailability); err != nil {
		return err
	}
	// Peers: the same serving certificate, or one the webhook's CA (ca.crt beside
	// tls.crt, as cert-manager and CERT_MODE=self write it) signed for the same names.
	r.peerTrust = peerauth.Trust{Own: r.certs.GetCertificate, CAFile: filepath.Join(filepath.Dir(cfg.Certs.CertFile), "ca.crt")}
	if _, err := os.Stat(r.peerTrust.CAFile); err != nil && !cfg.Certs.Self { // CERT_MODE=self writes ca.crt
		log.Warnf("no CA certificate at %s: with several replicas, seat claims forwarded between them fail while a renewed certificate spreads (docs/security.md#certificates)", r.peerTrust.CAFile)
	}
	if r.seats, err = ledger.Open(ctx, r.restCfg, r.caches, cfg.Namespaces.Own, log.WithField("component", "ledger"), ledger.Config{
		Settings: cfg.Ledger, Identity: r.identity, PeerClient: peerauth.NewClient(r.peerTrust), Owner: r.owner,
	}); err != nil {
		return err
	}
	// The loop's records of unavailable terms are Leases in the webhook's namespace, read
	// by every replica: admission honours records another replica's loop wrote.
	r.records = unavailability.NewRecords(r.client, cfg.Namespaces.Own)
	r.records.SetOwner(r.owner)
	r.records.Start(ctx)
	if cfg.Admission.ImageArchitectures {
		// Pull secrets and ServiceAccounts are read only with IMAGE_PULL_SECRETS=on (the
		// chart grants the right only then).
		images := cfg.Images
		images.Kube, images.MetricsNamespace = r.client, webhook.MetricsNamespace
		r.images = imagearch.New(images)
	}
	go r.waitForSync(ctx, r.log)
	return nil
}

// startDoor keeps the admission token (ADMISSION_TOKEN_SECRET): only callers that know
// it, the API server, have reviews answered.
func (r *replica) startDoor(ctx context.Context) error {
	cfg := r.cfg
	if cfg.Certs.TokenSecret == "" {
		r.entry.Warn("ADMISSION_TOKEN_SECRET is not set: anyone who reaches the webhook's port can have AdmissionReviews answered and hold seats")
		return nil
	}
	var err error
	tokenCfg := admissiontoken.Config{
		Client: r.client, Namespace: cfg.Namespaces.Own, SecretName: cfg.Certs.TokenSecret,
		MutatingConfig: cfg.Certs.MutatingConfig, ValidatingConfig: cfg.Certs.ValidatingConfig,
		Certificate: r.certs.GetCertificate, Log: r.log.WithField("component", "admissiontoken"),
	}
	r.door, err = admissiontoken.New(tokenCfg)
	if err != nil {
		return err
	}
	go r.door.Run(ctx)
	return nil
}

// startCaches starts the pod and workload caches, with a client of their own for
// live lookups of owners the cache has not seen: forged reviews naming unknown
// ReplicaSets then cannot use up the shared client's rate.
func (r *replica) startCaches(ctx context.Context) error {
	var err error
	if r.caches, err = clusterview.NewCaches(r.client, 10*time.Minute); err != nil {
		return err
	}
	liveCfg := rest.CopyConfig(r.restCfg)
	liveCfg.QPS, liveCfg.Burst = clusterview.LiveLookupQPS, 2*clusterview.LiveLookupQPS+1
	liveClient, err := kubernetes.NewForConfig(liveCfg)
	if err != nil {
		return fmt.Errorf("create live lookup client: %w", err)
	}
	r.caches.Resolver.Client = liveClient
	r.caches.Resolver.CacheGrace = cacheGrace
	r.caches.Resolver.LiveSlots = make(chan struct{}, clusterview.LiveLookups)
	if err := r.watchRollouts(ctx, liveCfg); err != nil {
		return err
	}
	if r.policies, err = newPolicyCache(r.restCfg, r.client, r.entry); err != nil {
		return err
	}
	r.caches.Resolver.Policies = r.policies
	// The scope every reader after admission follows: the pod entries of this webhook's
	// MutatingWebhookConfiguration as they are live, over the namespaces' labels.
	if r.scope, err = clusterview.NewScope(r.client, r.cfg.Certs.MutatingConfig, r.policies.NamespaceLabels, 10*time.Minute); err != nil {
		return err
	}
	r.caches.Start(ctx)
	r.policies.Start(ctx)
	r.scope.Start(ctx)
	return nil
}

// rolloutLookInterval is how often a replica looks whether Argo Rollouts has been
// installed, while it is not: one small discovery GET (a 404) per look.
const rolloutLookInterval = 30 * time.Second

// watchRollouts has the caches follow a ReplicaSet's Argo Rollout when the API server
// serves Rollouts. Not served at start, it looks again every rolloutLookInterval (on
// ctx) and follows them from when they are, without a restart: discovery, not a watch
// of CustomResourceDefinitions, which the chart's RBAC does not grant and which would
// keep every CRD of the cluster in memory. Until then a ReplicaSet a Rollout controls
// counts as a bare ReplicaSet. Live lookups use liveCfg, as the other workloads' do.
func (r *replica) watchRollouts(ctx context.Context, liveCfg *rest.Config) error {
	watch, err := metadata.NewForConfig(r.restCfg)
	if err != nil {
		return fmt.Errorf("create metadata client for Rollouts: %w", err)
	}
	live, err := metadata.NewForConfig(liveCfg)
	if err != nil {
		return fmt.Errorf("create live metadata client for Rollouts: %w", err)
	}
	disc := r.client.Discovery()
	served, err := policy.RolloutsServed(disc)
	if err != nil {
		return err
	}
	if served {
		r.caches.WatchRollouts(watch, live)
		return nil
	}
	r.entry.Infof("%s is not served (Argo Rollouts not installed?): ReplicaSets of Rollouts count as bare ReplicaSets; looking again every %s",
		clusterview.RolloutResource.GroupResource(), rolloutLookInterval)
	go r.caches.WatchRolloutsWhenServed(ctx, func() (bool, error) { return policy.RolloutsServed(disc) }, rolloutLookInterval, watch, live, r.entry)
	return nil
}

// newPolicyCache watches namespaces and, when the API server serves the policy CRDs,
// PlacementPolicies and ClusterPlacementPolicies. Without the CRDs (an install that
// left them out) only namespace defaults apply; they are looked for once, at start.
func newPolicyCache(restCfg *rest.Config, client kubernetes.Interface, log logrus.FieldLogger) (*policy.Cache, error) {
	var dyn dynamic.Interface
	if _, err := client.Discovery().ServerResourcesForGroupVersion(v1alpha1.GroupVersion.String()); err != nil {
		log.WithError(err).Warnf("the %s API is not served (CRDs not installed?): only namespace defaults apply, no policies", v1alpha1.GroupVersion)
	} else if dyn, err = dynamic.NewForConfig(restCfg); err != nil {
		return nil, fmt.Errorf("create dynamic client for policies: %w", err)
	}
	return policy.NewCache(client, dyn, 10*time.Minute, log)
}

// newHandlers makes the admission handlers, readiness and the peer endpoint.
func (r *replica) newHandlers(recorder record.EventRecorder) {
	cfg := r.cfg
	namespaces := cfg.Namespaces
	mutator := &placement.PodMutator{
		Resolver: r.caches.Resolver, Capacity: r.catalog, Ledger: r.seats, Recorder: recorder, Metrics: r.metrics,
		Namespaces: namespaces, Synced: r.synced, Log: r.entry, Settings: cfg.Admission, Availability: r.records,
	}
	if r.images != nil {
		mutator.Images = &placement.ImageArchitectures{Images: r.images, Capacity: r.catalog, Budget: cfg.Admission.ImageBudget}
	}
	validator := &validation.WorkloadValidator{Capacity: r.catalog, Hints: r.catalog, WarnOnly: cfg.WarnOnly, Metrics: r.metrics, Log: r.entry,
		Scope: &validation.NamespaceScope{WhyNot: r.scope.WhyNotLabels, Each: r.policies.EachNamespace}}
	if r.images != nil {
		validator.Images = &placement.ImageArchitectures{Images: r.images, Capacity: r.catalog, Budget: cfg.Admission.ImageBudget}
	}
	r.handlers = &webhook.Handlers{
		Mutate:     mutator.Admit,
		Validate:   validator.Admit,
		NotEnabled: validator.AdmitNotEnabled,
		Ready:      r.ready,
		Metrics:    r.metrics,
		Log:        r.entry,
		Limits:     cfg.Serving.Limits,
		Peer:       peerauth.Require(r.peerTrust, r.seats.PeerHandler()),
		PeerPath:   ledger.PeerClaimPath,
		Profiling:  cfg.Serving.Profiling,
	}
	if r.door != nil {
		r.handlers.Door = r.door
	}
}

// ready is /readyz's answer: nil once every view has synced and the replica answers
// at its peer address, until the drain begins.
func (r *replica) ready() error {
	if r.draining.Load() {
		return errors.New("shutting down")
	}
	if err := r.unsynced(); err != nil {
		return err
	}
	if r.door != nil && !r.door.Synced() {
		return errors.New("admission token not read yet (ADMISSION_TOKEN_SECRET)")
	}
	if !r.seats.PeerReached() {
		return errors.New("not reachable at its peer address yet")
	}
	return nil
}

// run listens, serves admissions until stop, drains, and hands the revisions this
// replica owns over to the others.
func (r *replica) run(ctx, stop context.Context, start func() bool) error {
	cfg, entry := r.cfg, r.entry
	ln, err := net.Listen("tcp", cfg.Serving.ListenAddress)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Serving.ListenAddress, err)
	}
	plain, err := listenPlain(cfg.Serving, r.handlers)
	if err != nil {
		_ = ln.Close()
		return err
	}
	for _, msg := range cfg.Deprecations {
		entry.Warn(msg)
	}
	build := currentBuild()
	entry.WithFields(logrus.Fields{"blocklist": slices.Sorted(maps.Keys(cfg.Namespaces.Blocklist)), "namespace": cfg.Namespaces.Own,
		"version": build.Version, "revision": build.Revision, "goVersion": build.GoVersion}).Info("starting")
	if !start() {
		_ = ln.Close()
		plain.close()
		return nil
	}
	// Metrics and probes are served until admissions have stopped: /readyz answers
	// 503 through the drain.
	plainCtx, stopPlain := context.WithCancel(ctx)
	plainDone := plain.serve(plainCtx, entry)
	go r.seats.AwaitPeerAddress(ctx)
	// The drain begins with the hand-over, while this replica still answers: it stops
	// answering as owner, and the first replica to forward a claim of a revision is
	// written its owner, with its reservations; its own admissions are forwarded to
	// them. As the drain ends, still answering, a final hand-over releases what nobody
	// took: from then on it takes nothing back, as no peer could reach it once its
	// server stops. The last call covers a server that failed before its drain.
	drain := webhook.Drain{Period: cfg.Serving.ShutdownDrain, Begin: func() {
		r.draining.Store(true)
		r.handover(ctx, false)
	}, End: func() { r.handover(ctx, true) }}
	err = webhook.ServeDrain(stop, ln, r.handlers.Mux(), r.certs.GetCertificate, drain, entry)
	stopPlain()
	<-plainDone
	r.handover(ctx, true)
	return err
}

// handover hands the revisions this replica owns over to the others (Ledger.Handover),
// within 5 s.
func (r *replica) handover(ctx context.Context, final bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r.seats.Handover(ctx, final)
}
