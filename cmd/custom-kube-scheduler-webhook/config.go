package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// setting is one configuration value of `serve`: read from its environment variable,
// overridden by its flag when the flag is given.
type setting struct {
	key, env, def, usage string
}

// serveSettings is the configuration table of the README, in one place.
var serveSettings = []setting{
	{"log-level", "LOG_LEVEL", "info", "log level: trace, debug, info, warn or error (JSON logs)"},
	{"blocklisted-namespace-list", "BLOCKLISTED_NAMESPACE_LIST", "kube-system,kube-public", "comma-separated namespaces whose pods are never mutated"},
	{"listen-address", "LISTEN_ADDRESS", ":9443", "HTTPS listen address"},
	{"tls-cert-file", "TLS_CERT_FILE", "/etc/webhook/certs/tls.crt", "serving certificate (PEM); reloaded when it changes"},
	{"tls-key-file", "TLS_KEY_FILE", "/etc/webhook/certs/tls.key", "serving key (PEM); reloaded when it changes"},
	{"kubeconfig", "KUBECONFIG", "", "kubeconfig file; empty means in-cluster configuration"},
	{"webhook-namespace", "POD_NAMESPACE", "custom-kube-scheduler-webhook", "the webhook's own namespace, never mutated"},
	{"ledger", "LEDGER", "memory", "where seat reservations live: memory (exact with one replica) or lease (Leases in the webhook namespace, exact with several replicas)"},
	{"reservation-ttl", "RESERVATION_TTL", "30s", "how long a seat handed to an admitted pod stays reserved until the pod is seen"},
	{"validation-mode", "VALIDATION_MODE", "reject", "invalid strategy on a workload at apply time: reject or warn"},
	{"eks-cluster-name", "EKS_CLUSTER_NAME", "", "EKS cluster whose managed node groups serve terms; empty turns node-group lookups off"},
	{"nodegroup-refresh-interval", "NODEGROUP_REFRESH_INTERVAL", "5m", "how often node groups are listed"},
	{"cert-mode", "CERT_MODE", "file", "file: certificate files are provided (cert-manager, a Secret); self: bootstrap and rotate a CA and serving certificate in a Secret"},
	{"cert-secret-name", "CERT_SECRET_NAME", "custom-kube-scheduler-webhook-certs", "with cert-mode self: the Secret holding the CA and serving certificate"},
	{"service-name", "SERVICE_NAME", "custom-kube-scheduler-webhook", "with cert-mode self: the Service the serving certificate is issued for"},
	{"mutating-webhook-configuration", "MUTATING_WEBHOOK_CONFIGURATION", "custom-kube-scheduler-webhook", "with cert-mode self: MutatingWebhookConfiguration whose caBundle is kept current"},
	{"validating-webhook-configuration", "VALIDATING_WEBHOOK_CONFIGURATION", "custom-kube-scheduler-webhook", "with cert-mode self: ValidatingWebhookConfiguration whose caBundle is kept current"},
	{"admission-deadline", "ADMISSION_DEADLINE", "4s", "time a pod admission may take; past it the pod is admitted unplaced with a warning (keep it below the webhook's timeoutSeconds, 5 in the chart)"},
}

// serveConfig is the validated configuration of `serve`.
type serveConfig struct {
	LogLevel          logrus.Level
	Blocklist         map[string]bool
	ListenAddress     string
	TLSCertFile       string
	TLSKeyFile        string
	Kubeconfig        string
	Namespace         string
	ReservationTTL    time.Duration
	LeaseLedger       bool
	WarnOnly          bool
	EKSClusterName    string
	NodeGroupRefresh  time.Duration
	SelfCert          bool
	CertSecretName    string
	ServiceName       string
	MutatingConfig    string
	ValidatingConfig  string
	AdmissionDeadline time.Duration
}

func addSettingFlags(flags *pflag.FlagSet, settings []setting) {
	for _, s := range settings {
		flags.String(s.key, s.def, fmt.Sprintf("%s (env %s)", s.usage, s.env))
	}
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
		Blocklist:        parseList(v.GetString("blocklisted-namespace-list")),
		ListenAddress:    v.GetString("listen-address"),
		TLSCertFile:      v.GetString("tls-cert-file"),
		TLSKeyFile:       v.GetString("tls-key-file"),
		Kubeconfig:       v.GetString("kubeconfig"),
		Namespace:        strings.TrimSpace(v.GetString("webhook-namespace")),
		EKSClusterName:   strings.TrimSpace(v.GetString("eks-cluster-name")),
		CertSecretName:   v.GetString("cert-secret-name"),
		ServiceName:      v.GetString("service-name"),
		MutatingConfig:   v.GetString("mutating-webhook-configuration"),
		ValidatingConfig: v.GetString("validating-webhook-configuration"),
	}
	// The original accepted "INFO" and an empty value; both still work.
	level := strings.TrimSpace(v.GetString("log-level"))
	if level == "" {
		level = "info"
	}
	var err error
	if c.LogLevel, err = logrus.ParseLevel(level); err != nil {
		return nil, fmt.Errorf("LOG_LEVEL %q: want trace, debug, info, warn or error", level)
	}
	if c.ReservationTTL, err = positiveDuration(v, "reservation-ttl", "RESERVATION_TTL"); err != nil {
		return nil, err
	}
	if c.NodeGroupRefresh, err = positiveDuration(v, "nodegroup-refresh-interval", "NODEGROUP_REFRESH_INTERVAL"); err != nil {
		return nil, err
	}
	if c.AdmissionDeadline, err = positiveDuration(v, "admission-deadline", "ADMISSION_DEADLINE"); err != nil {
		return nil, err
	}
	switch mode := strings.ToLower(strings.TrimSpace(v.GetString("ledger"))); mode {
	case "memory", "lease":
		c.LeaseLedger = mode == "lease"
	default:
		return nil, fmt.Errorf("LEDGER %q: want memory or lease", mode)
	}
	switch mode := strings.ToLower(strings.TrimSpace(v.GetString("validation-mode"))); mode {
	case "reject", "warn":
		c.WarnOnly = mode == "warn"
	default:
		return nil, fmt.Errorf("VALIDATION_MODE %q: want reject or warn", mode)
	}
	switch mode := strings.ToLower(strings.TrimSpace(v.GetString("cert-mode"))); mode {
	case "file", "self":
		c.SelfCert = mode == "self"
	default:
		return nil, fmt.Errorf("CERT_MODE %q: want file or self", mode)
	}
	return c, nil
}

func positiveDuration(v *viper.Viper, key, env string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v.GetString(key)))
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s %q: want a positive duration such as 30s or 5m", env, v.GetString(key))
	}
	return d, nil
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
