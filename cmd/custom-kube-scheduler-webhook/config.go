package main

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/converge"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/imagearch"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/interruption"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/ledger"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/placement"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/selfcert"
)

// setting is one configuration value of `serve`: read from its environment variable,
// overridden by its flag when the flag is given.
type setting struct {
	key, env, def, usage string
}

// serveSettings is the configuration table of docs/configuration.md, in one place.
var serveSettings = []setting{
	{"log-level", "LOG_LEVEL", "info", "log level: trace, debug, info, warn or error (JSON logs)"},
	{"blocklisted-namespace-list", "BLOCKLISTED_NAMESPACE_LIST", "kube-system,kube-public", "comma-separated namespaces whose pods are never mutated"},
	{"listen-address", "LISTEN_ADDRESS", ":9443", "HTTPS listen address: admission (/mutate, /validate) and the other replicas' seat claims"},
	{"metrics-address", "METRICS_ADDRESS", ":8080", "plain-HTTP listen address of /metrics (and /debug/pprof/ with PROFILING=on); 0 turns it off"},
	{"health-address", "HEALTH_ADDRESS", ":8081", "plain-HTTP listen address of the probes /healthz and /readyz (a 503 names each cache not synced yet); 0 turns it off"},
	{"tls-cert-file", "TLS_CERT_FILE", "/etc/webhook/certs/tls.crt", "serving certificate (PEM); reloaded when it changes"},
	{"tls-key-file", "TLS_KEY_FILE", "/etc/webhook/certs/tls.key", "serving key (PEM); reloaded when it changes"},
	{"kubeconfig", "KUBECONFIG", "", "kubeconfig file; empty means in-cluster configuration"},
	{"webhook-namespace", "POD_NAMESPACE", "custom-kube-scheduler-webhook", "the webhook's own namespace, never mutated"},
	{"reservation-ttl", "RESERVATION_TTL", "30s", "how long a seat handed to an admitted pod stays reserved until the pod is seen"},
	{"peer-address", "PEER_ADDRESS", "", "base URL at which other replicas reach this one with the seat claims of revisions it owns; empty: https://$POD_IP:<listen port>, or the listen address's host (127.0.0.1 when it has none) outside a pod"},
	{"validation-mode", "VALIDATION_MODE", "reject", "invalid strategy on a workload at apply time: reject or warn"},
	{"eks-cluster-name", "EKS_CLUSTER_NAME", "", "EKS cluster whose managed node groups serve terms; empty turns node-group lookups off"},
	{"cert-mode", "CERT_MODE", "file", "file: certificate files are provided (cert-manager, a Secret); self: bootstrap and rotate a CA and serving certificate in a Secret"},
	{"cert-secret-name", "CERT_SECRET_NAME", "custom-kube-scheduler-webhook-certs", "with cert-mode self: the Secret holding the CA and serving certificate"},
	{"service-name", "SERVICE_NAME", "custom-kube-scheduler-webhook", "with cert-mode self: the Service the serving certificate is issued for"},
	{"mutating-webhook-configuration", "MUTATING_WEBHOOK_CONFIGURATION", "custom-kube-scheduler-webhook", "this webhook's MutatingWebhookConfiguration: its pod entries' namespaceSelector and objectSelector are the scope the convergence loop, policy status and cost metrics follow (read live); its paths carry the admission token; with cert-mode self its caBundle is kept current"},
	{"validating-webhook-configuration", "VALIDATING_WEBHOOK_CONFIGURATION", "custom-kube-scheduler-webhook", "with cert-mode self: ValidatingWebhookConfiguration whose caBundle is kept current"},
	{"admission-token-secret", "ADMISSION_TOKEN_SECRET", "", "Secret in the webhook's namespace holding the admission token: reviews are answered only at /<token>/mutate and /<token>/validate, and the token is written into the paths of MUTATING_WEBHOOK_CONFIGURATION and VALIDATING_WEBHOOK_CONFIGURATION and rotated with the serving certificate; empty answers /mutate and /validate to anyone who reaches the port (the chart sets it)"},
	{"shutdown-drain", "SHUTDOWN_DRAIN", "5s", "on SIGTERM: /readyz fails at once, admissions are still served this long (until the endpoint removal has spread), then in-flight ones finish; 0 stops at once"},
	{"max-inflight-admissions", "MAX_INFLIGHT_ADMISSIONS", "256", "admissions handled at once; more wait up to 1s, then get 429 (the failure policy applies)"},
	{"max-inflight-body-bytes", "MAX_INFLIGHT_BODY_BYTES", "24Mi", "sum of AdmissionReview bodies handled at once (one body is capped at 3 MiB + 64 KiB); bounds admission memory"},
	{"converge", "CONVERGE", "on", "on: the elected replica runs the convergence and capacity-fallback loop; off: placement at admission only (unavailable terms another replica's loop recorded are still honoured)"},
	{"fallback-after", "FALLBACK_AFTER", "3m", "how long a term's placed pods may stay Pending and unschedulable before the term is marked unavailable"},
	{"fallback-cooldown", "FALLBACK_COOLDOWN", "5m", "how long an unavailable term's seats go to the fallback before it is tried again; doubles each time it strands again (up to 16x)"},
	{"converge-max-unavailable", "CONVERGE_MAX_UNAVAILABLE", "10%", "per workload, how many pods may be unavailable at once while the loop moves pods (a count or a percentage, at least 1)"},
	{"converge-max-unavailable-cluster", "CONVERGE_MAX_UNAVAILABLE_CLUSTER", "20", "the pace, across the cluster: how many pods the convergence loop evicted may be unavailable at once (no Ready replacement yet), on top of each workload's budget; moves that wait for it go in order: namespace, then workload name"},
	{"converge-max-unavailable-per-namespace", "CONVERGE_MAX_UNAVAILABLE_PER_NAMESPACE", "10", "the pace, in each namespace: how many pods the convergence loop evicted there may be unavailable at once"},
	{"move-window", "MOVE_WINDOW", "always", "when the convergence loop makes non-urgent moves (returns from fallback, drift, tidying seats): \"schedule=<cron>; duration=<d>; timeZone=<IANA name>; maxMoves=<per opening>\", or always; a policy's spec.moveWindow or a workload's custom-kube-scheduler-webhook.io/move-window annotation overrides it; moves of pods without a node or a seat, or on a node EC2 signalled, never wait (docs/strategies.md)"},
	{"min-fallback-stay", "MIN_FALLBACK_STAY", "0", "how long a pod stays on its fallback term before the loop may move it back to its own term (0: no minimum); a policy's spec.minFallbackStay or the workload's custom-kube-scheduler-webhook.io/min-fallback-stay annotation overrides it"},
	{"max-evictions-per-minute", "MAX_EVICTIONS_PER_MINUTE", "30", "across the cluster, how many pods the convergence loop may evict in a minute (a burst of that many, then a steady rate), on top of each workload's budget"},
	{"profiling", "PROFILING", "off", "on: serve Go's runtime profiles (heap, CPU, goroutines) at /debug/pprof/ on the metrics port (METRICS_ADDRESS), for diagnosing memory or CPU use; off in normal operation"},
	{"owner-deployment", "OWNER_DEPLOYMENT", "", "Deployment in the webhook's namespace that owns the Leases this process creates (seat and unavailability records, the leader Lease), so they are deleted with it; empty: no owner (the chart sets its own Deployment)"},
	{"cost-metrics", "COST_METRICS", "off", "on: export each workload term's realized cost (pods by capacity type, USD per hour, the saving against all on-demand), refreshed by the elected replica (every replica with CONVERGE=off); prices from AWS (needs pricing:GetProducts and ec2:DescribeSpotPriceHistory, which the chart does not grant) or COST_PRICES_FILE"},
	{"cost-prices-file", "COST_PRICES_FILE", "", "with cost-metrics on: price file used instead of AWS (lines: instance-type capacity-type zone|region|* usd-per-hour), read at startup"},
	{"interruption-queue", "INTERRUPTION_QUEUE", "", "SQS queue (URL, or name in AWS_REGION) that EventBridge sends EC2 spot interruption warnings, rebalance recommendations, instance state changes and Capacity Block expiration warnings to; the elected replica reads it and marks a term at risk (its seats go to the fallback) when signals reach INTERRUPTION_RISK_SHARE of its nodes, or one of its nodes is on an ending Capacity Block; needs CONVERGE=on and sqs:ReceiveMessage, sqs:DeleteMessage, sqs:GetQueueUrl; empty: off (docs/interruption-signals.md)"},
	{"interruption-window", "INTERRUPTION_WINDOW", "10m", "with interruption-queue: how long a signal counts; older ones are never acted on"},
	{"interruption-risk-share", "INTERRUPTION_RISK_SHARE", "50%", "with interruption-queue: share of a term's nodes with a signal within INTERRUPTION_WINDOW that puts the term at risk (1% to 100%)"},
	{"interruption-risk-min-nodes", "INTERRUPTION_RISK_MIN_NODES", "2", "with interruption-queue: fewest signalled nodes that put a term at risk, whatever its size"},
	{"interruption-move-signalled-nodes", "INTERRUPTION_MOVE_SIGNALLED_NODES", "off", "with interruption-queue: on moves the pods of every signalled node within the budget, even when its term is not at risk (their replacements stay on the term); off moves only those of terms at risk"},
	{"admission-deadline", "ADMISSION_DEADLINE", "4s", "time a pod admission may take; past it the pod is admitted unplaced with a warning (keep it below the webhook's timeoutSeconds, 5 in the chart)"},
	{"on-demand-accepts-reserved", "ON_DEMAND_ACCEPTS_RESERVED", "off", "on: a term karpenter.sh/capacity-type=on-demand is patched as a required node affinity In [on-demand, reserved], so Karpenter fills capacity reservations first, as it advises; off: the term's nodeSelector stays on-demand only (docs/configuration.md)"},
	{"image-architectures", "IMAGE_ARCHITECTURES", "on", "on: a pod whose term leaves kubernetes.io/arch open, on capacity offering more than one architecture, is limited to the architectures all its images support (read from their registries, cached), and a term offering none of them is reported; off: images are never looked up (docs/architecture-aware-placement.md)"},
	{"image-lookup-budget", "IMAGE_LOOKUP_BUDGET", "1s", "how long an admission waits for its images' architectures (below ADMISSION_DEADLINE); past it the pod is placed without the requirement, with a warning, and the lookup goes on for the next pod"},
	{"image-pull-secrets", "IMAGE_PULL_SECRETS", "off", "on: registries are read with the pod's and its ServiceAccount's imagePullSecrets (needs get on secrets and serviceaccounts in every namespace: the chart's imageArchitectures.pullSecrets); off: anonymous, or an ECR token from the webhook's own IAM role"},
	{"image-insecure-registries", "IMAGE_INSECURE_REGISTRIES", "", "comma-separated registries (host:port) read over plain HTTP, e.g. a test registry on loopback; every other registry is read over HTTPS only"},
	{"image-internal-registries", "IMAGE_INTERNAL_REGISTRIES", "", "comma-separated registries (host or host:port) read over HTTPS although they resolve to a loopback, link-local or IMAGE_REFUSED_NETWORKS address (a registry inside the cluster); any other registry, or redirect, leading there is refused (docs/security.md)"},
	{"image-refused-networks", "IMAGE_REFUSED_NETWORKS", "", "comma-separated CIDRs no registry may resolve to unless listed in IMAGE_INTERNAL_REGISTRIES or IMAGE_INSECURE_REGISTRIES: set the cluster's service and pod ranges (loopback and link-local are always refused)"},
}

// serveConfig is the validated configuration of `serve`: one group of settings per
// component, each handed to the part that runs it.
type serveConfig struct {
	LogLevel logrus.Level
	// Namespaces are the ones never mutated: the blocklist and the webhook's own.
	Namespaces clusterview.NamespaceFilter
	Kube       kubeSettings
	Serving    servingSettings
	Certs      selfcert.Settings
	Admission  placement.Settings
	// WarnOnly answers an invalid strategy with a warning (VALIDATION_MODE=warn).
	WarnOnly bool
	// Images are the image architecture lookups' registry settings (read even with
	// IMAGE_ARCHITECTURES=off, Admission.ImageArchitectures).
	Images imagearch.Config
	Ledger ledger.Settings
	// Converge switches the convergence loop on; Loop are its settings.
	Converge bool
	Loop     converge.Settings
	// Interruption reads EC2's interruption signals (its Queue "": off).
	Interruption interruption.Settings
	Cost         report.CostSettings
	// Deprecations are warnings about settings that no longer do anything.
	Deprecations []string
}

// kubeSettings say how the process reaches the cluster and what it owns there.
type kubeSettings struct {
	Kubeconfig string
	// OwnerDeployment owns the Leases serve creates (empty: none).
	OwnerDeployment string
	// EKSClusterName names the cluster whose node groups are read ("": none).
	EKSClusterName string
}

// servingSettings are the listeners, the admissions' in-flight limits and the drain.
type servingSettings struct {
	ListenAddress string
	Limits        webhook.AdmissionLimits
	// MetricsAddress and HealthAddress are "" when switched off ("0").
	MetricsAddress string
	HealthAddress  string
	ShutdownDrain  time.Duration
	Profiling      bool
}

// loadServeConfig reads the settings through a fresh Viper instance (no global state).
func loadServeConfig(flags *pflag.FlagSet) (*serveConfig, error) {
	v := viper.New()
	for _, s := range serveSettings {
		if err := v.BindEnv(s.key, s.env); err != nil {
			return nil, fmt.Errorf("bind %s: %w", s.env, err)
		}
		if err := v.BindPFlag(s.key, flags.Lookup(s.key)); err != nil {
			return nil, fmt.Errorf("bind --%s: %w", s.key, err)
		}
	}
	c := &serveConfig{
		Namespaces: clusterview.NamespaceFilter{
			Blocklist: parseList(v.GetString("blocklisted-namespace-list")),
			Own:       strings.TrimSpace(v.GetString("webhook-namespace")),
		},
		Kube: kubeSettings{
			Kubeconfig:      v.GetString("kubeconfig"),
			OwnerDeployment: strings.TrimSpace(v.GetString("owner-deployment")),
			EKSClusterName:  strings.TrimSpace(v.GetString("eks-cluster-name")),
		},
		Serving: servingSettings{
			ListenAddress:  v.GetString("listen-address"),
			MetricsAddress: plainAddress(v.GetString("metrics-address")),
			HealthAddress:  plainAddress(v.GetString("health-address")),
		},
		Certs: selfcert.Settings{
			CertFile: v.GetString("tls-cert-file"), KeyFile: v.GetString("tls-key-file"),
			SecretName: v.GetString("cert-secret-name"), ServiceName: v.GetString("service-name"),
			MutatingConfig:   v.GetString("mutating-webhook-configuration"),
			ValidatingConfig: v.GetString("validating-webhook-configuration"),
			TokenSecret:      strings.TrimSpace(v.GetString("admission-token-secret")),
		},
	}
	for _, parse := range []func(*viper.Viper) error{c.parseAddresses, c.parseModes, c.parseAdmission, c.parseConvergence, c.parseCost, c.parseImages, c.parseInterruption} {
		if err := parse(v); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// parseAddresses checks the plain-HTTP addresses and works out the peer address.
func (c *serveConfig) parseAddresses(v *viper.Viper) error {
	for _, a := range []struct{ env, addr string }{{"METRICS_ADDRESS", c.Serving.MetricsAddress}, {"HEALTH_ADDRESS", c.Serving.HealthAddress}} {
		if _, _, err := net.SplitHostPort(a.addr); a.addr != "" && err != nil {
			return fmt.Errorf("%s %q: want host:port, :port, or 0 to turn it off", a.env, a.addr)
		}
	}
	var err error
	if c.Ledger.PeerAddress, err = peerAddress(v.GetString("peer-address"), c.Serving.ListenAddress, os.Getenv("POD_IP"), os.Getenv("KUBERNETES_SERVICE_HOST") != ""); err != nil {
		return err
	}
	return nil
}

// parseModes reads the log level and the certificate mode.
func (c *serveConfig) parseModes(v *viper.Viper) error {
	var err error
	// The original accepted "INFO" and an empty value; both still work.
	level := strings.TrimSpace(v.GetString("log-level"))
	if level == "" {
		level = "info"
	}
	if c.LogLevel, err = logrus.ParseLevel(level); err != nil {
		return fmt.Errorf("LOG_LEVEL %q: want trace, debug, info, warn or error", level)
	}
	certMode, err := oneOf(v, "cert-mode", "CERT_MODE", "file", "self")
	c.Certs.Self = certMode == "self"
	if err != nil {
		return err
	}
	if c.Certs.Self && filepath.Dir(c.Certs.CertFile) != filepath.Dir(c.Certs.KeyFile) {
		return fmt.Errorf("CERT_MODE=self writes the certificate and key into one directory: TLS_CERT_FILE and TLS_KEY_FILE must share it")
	}
	c.Admission.OnDemandAcceptsReserved, err = onOff(v, "on-demand-accepts-reserved", "ON_DEMAND_ACCEPTS_RESERVED")
	return err
}

// parseAdmission reads the admission path's settings: timings, limits, the validation
// mode and the retired settings.
func (c *serveConfig) parseAdmission(v *viper.Viper) error {
	var err error
	if c.Ledger.ReservationTTL, err = positiveDuration(v, "reservation-ttl", "RESERVATION_TTL"); err != nil {
		return err
	}
	if c.Admission.Deadline, err = positiveDuration(v, "admission-deadline", "ADMISSION_DEADLINE"); err != nil {
		return err
	}
	if err := c.readRetired(); err != nil {
		return err
	}
	validation, err := oneOf(v, "validation-mode", "VALIDATION_MODE", "reject", "warn")
	if err != nil {
		return err
	}
	c.WarnOnly = validation == "warn"
	if c.Serving.ShutdownDrain, err = time.ParseDuration(strings.TrimSpace(v.GetString("shutdown-drain"))); err != nil || c.Serving.ShutdownDrain < 0 {
		return fmt.Errorf("SHUTDOWN_DRAIN %q: want a duration such as 5s, or 0", v.GetString("shutdown-drain"))
	}
	if c.Serving.Limits.MaxInFlight, err = positiveInt(v, "max-inflight-admissions", "MAX_INFLIGHT_ADMISSIONS"); err != nil {
		return err
	}
	q, err := resource.ParseQuantity(strings.TrimSpace(v.GetString("max-inflight-body-bytes")))
	if err != nil || q.Value() < webhook.MaxBodyBytes {
		return fmt.Errorf("MAX_INFLIGHT_BODY_BYTES %q: want a byte quantity such as 24Mi, at least one maximum body (%d bytes)", v.GetString("max-inflight-body-bytes"), webhook.MaxBodyBytes)
	}
	c.Serving.Limits.MaxInFlightBytes = q.Value()
	return nil
}

// parseConvergence reads the convergence loop's and the capacity views' settings.
func (c *serveConfig) parseConvergence(v *viper.Viper) error {
	var err error
	if c.Converge, err = onOff(v, "converge", "CONVERGE"); err != nil {
		return err
	}
	if c.Serving.Profiling, err = onOff(v, "profiling", "PROFILING"); err != nil {
		return err
	}
	if c.Loop.FallbackAfter, err = positiveDuration(v, "fallback-after", "FALLBACK_AFTER"); err != nil {
		return err
	}
	if c.Loop.Cooldown, err = positiveDuration(v, "fallback-cooldown", "FALLBACK_COOLDOWN"); err != nil {
		return err
	}
	c.Loop.MaxUnavailable = intstr.Parse(strings.TrimSpace(v.GetString("converge-max-unavailable")))
	if _, err := converge.Budget(c.Loop.MaxUnavailable, 10); err != nil {
		return err
	}
	if c.Loop.Timing.Window, err = strategy.ParseWindow(v.GetString("move-window")); err != nil {
		return fmt.Errorf("MOVE_WINDOW: %w", err)
	}
	if c.Loop.Timing.MinStay, err = strategy.ParseMinFallbackStay(v.GetString("min-fallback-stay")); err != nil {
		return fmt.Errorf("MIN_FALLBACK_STAY: %w", err)
	}
	if c.Loop.MaxEvictionsPerMinute, err = positiveInt(v, "max-evictions-per-minute", "MAX_EVICTIONS_PER_MINUTE"); err != nil {
		return err
	}
	if c.Loop.MaxUnavailableCluster, err = positiveInt(v, "converge-max-unavailable-cluster", "CONVERGE_MAX_UNAVAILABLE_CLUSTER"); err != nil {
		return err
	}
	if c.Loop.MaxUnavailablePerNamespace, err = positiveInt(v, "converge-max-unavailable-per-namespace", "CONVERGE_MAX_UNAVAILABLE_PER_NAMESPACE"); err != nil {
		return err
	}
	return nil
}

// parseCost reads the cost metrics' settings; a price file is read now, so a bad one
// stops the start with the line at fault rather than failing every refresh.
func (c *serveConfig) parseCost(v *viper.Viper) error {
	var err error
	if c.Cost.Enabled, err = onOff(v, "cost-metrics", "COST_METRICS"); err != nil {
		return err
	}
	file := strings.TrimSpace(v.GetString("cost-prices-file"))
	switch {
	case file == "":
	case !c.Cost.Enabled:
		return fmt.Errorf("COST_PRICES_FILE %q needs COST_METRICS=on", file)
	default:
		if c.Cost.Prices, err = pricing.LoadFile(file); err != nil {
			return fmt.Errorf("COST_PRICES_FILE: %w", err)
		}
	}
	return nil
}

// parseImages reads the image architecture settings; the budget must leave the
// admission time for the rest of its work.
func (c *serveConfig) parseImages(v *viper.Viper) error {
	var err error
	im, ad := &c.Images, &c.Admission
	if ad.ImageArchitectures, err = onOff(v, "image-architectures", "IMAGE_ARCHITECTURES"); err != nil {
		return err
	}
	if ad.ImageBudget, err = positiveDuration(v, "image-lookup-budget", "IMAGE_LOOKUP_BUDGET"); err != nil {
		return err
	}
	if ad.ImageBudget >= ad.Deadline {
		return fmt.Errorf("IMAGE_LOOKUP_BUDGET %s: want less than ADMISSION_DEADLINE (%s)", ad.ImageBudget, ad.Deadline)
	}
	if im.PullSecrets, err = onOff(v, "image-pull-secrets", "IMAGE_PULL_SECRETS"); err != nil {
		return err
	}
	for h := range parseList(v.GetString("image-insecure-registries")) {
		if strings.Contains(h, "/") {
			return fmt.Errorf("IMAGE_INSECURE_REGISTRIES %q: want registries as host or host:port, without a scheme or path", h)
		}
		im.Insecure = append(im.Insecure, h)
	}
	slices.Sort(im.Insecure)
	for h := range parseList(v.GetString("image-internal-registries")) {
		if strings.Contains(h, "/") {
			return fmt.Errorf("IMAGE_INTERNAL_REGISTRIES %q: want registries as host or host:port, without a scheme or path", h)
		}
		im.Internal = append(im.Internal, h)
	}
	slices.Sort(im.Internal)
	if im.RefusedNetworks, err = imagearch.ParseNetworks(slices.Sorted(maps.Keys(parseList(v.GetString("image-refused-networks"))))); err != nil {
		return fmt.Errorf("IMAGE_REFUSED_NETWORKS: %w", err)
	}
	return nil
}

// parseInterruption reads the interruption signals' settings (checked even while they
// are off, so a typo shows before the queue is set).
func (c *serveConfig) parseInterruption(v *viper.Viper) error {
	var err error
	c.Interruption.Queue = strings.TrimSpace(v.GetString("interruption-queue"))
	if c.Interruption.Queue != "" && !c.Converge {
		return fmt.Errorf("INTERRUPTION_QUEUE %q needs CONVERGE=on: the convergence loop acts on the signals", c.Interruption.Queue)
	}
	if c.Interruption.Rule.Window, err = positiveDuration(v, "interruption-window", "INTERRUPTION_WINDOW"); err != nil {
		return err
	}
	share := strings.TrimSpace(v.GetString("interruption-risk-share"))
	n, err := strconv.Atoi(strings.TrimSuffix(share, "%"))
	if err != nil || !strings.HasSuffix(share, "%") || n < 1 || n > 100 {
		return fmt.Errorf("INTERRUPTION_RISK_SHARE %q: want a percentage from 1%% to 100%%", share)
	}
	c.Interruption.Rule.SharePercent = n
	if c.Interruption.Rule.MinNodes, err = positiveInt(v, "interruption-risk-min-nodes", "INTERRUPTION_RISK_MIN_NODES"); err != nil {
		return err
	}
	if c.Loop.MoveSignalledNodes, err = onOff(v, "interruption-move-signalled-nodes", "INTERRUPTION_MOVE_SIGNALLED_NODES"); err != nil {
		return err
	}
	return c.Interruption.Rule.Validate()
}

// plainAddress reads METRICS_ADDRESS or HEALTH_ADDRESS: "0" (as in controller-runtime)
// or empty switches the listener off and is returned as "".
func plainAddress(s string) string {
	if s = strings.TrimSpace(s); s == "0" {
		return ""
	}
	return s
}

func positiveDuration(v *viper.Viper, key, env string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v.GetString(key)))
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s %q: want a positive duration such as 30s or 5m", env, v.GetString(key))
	}
	return d, nil
}

func positiveInt(v *viper.Viper, key, env string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v.GetString(key)))
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s %q: want a positive integer", env, v.GetString(key))
	}
	return n, nil
}

// parseList splits a comma-separated list, tolerating spaces and empty items.
func parseList(s string) map[string]bool {
	out := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out[item] = true
		}
	}
	return out
}

// peerAddress is the URL other replicas forward seat claims to: PEER_ADDRESS, or
// https://<pod IP>:<listen port> in a pod (POD_IP from the downward API), or the listen
// address's own host outside one (127.0.0.1 for a wildcard: replicas on one machine).
// In a pod without either, loopback would send the others' claims to themselves.
func peerAddress(setting, listen, podIP string, inPod bool) (string, error) {
	if setting != "" {
		u, err := url.Parse(setting)
		if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return "", usageError("PEER_ADDRESS %q: want https://host:port", setting)
		}
		return strings.TrimSuffix(setting, "/"), nil
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", usageError("LISTEN_ADDRESS %q: want host:port (%v)", listen, err)
	}
	wildcard := host == "" || host == "0.0.0.0" || host == "::"
	switch {
	case podIP != "":
		host = podIP
	case wildcard && inPod:
		return "", usageError("in a pod, set POD_IP from the downward API (fieldPath: status.podIP) or PEER_ADDRESS: other replicas forward seat claims there")
	case wildcard:
		host = "127.0.0.1"
	}
	return "https://" + net.JoinHostPort(host, port), nil
}

// oneOf reads a setting that takes one of choices, in any case.
func oneOf(v *viper.Viper, key, env string, choices ...string) (string, error) {
	mode := strings.ToLower(strings.TrimSpace(v.GetString(key)))
	if !slices.Contains(choices, mode) {
		return "", fmt.Errorf("%s %q: want %s", env, mode, strings.Join(choices, " or "))
	}
	return mode, nil
}

// onOff reads a switch: on or off (true and false are taken too).
func onOff(v *viper.Viper, key, env string) (bool, error) {
	switch mode := strings.ToLower(strings.TrimSpace(v.GetString(key))); mode {
	case "on", "true":
		return true, nil
	case "off", "false":
		return false, nil
	default:
		return false, fmt.Errorf("%s %q: want on or off", env, mode)
	}
}
