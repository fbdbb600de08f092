package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// retiredSettings were settings once. Nobody was expected to turn them: each is now a
// constant of the package that uses it. Set, the webhook still starts, with a warning.
var retiredSettings = []struct{ key, env, now string }{
	{"nodegroup-refresh-interval", "NODEGROUP_REFRESH_INTERVAL", "node groups are listed every 5m"},
	{"admission-queue-wait", "ADMISSION_QUEUE_WAIT", "an admission waits at most 1s for room under the in-flight limits"},
	{"live-lookup-qps", "LIVE_LOOKUP_QPS", "live workload lookups run at 20 per second"},
	{"live-lookup-concurrency", "LIVE_LOOKUP_CONCURRENCY", "at most 8 live workload lookups run at once"},
	{"cost-metrics-interval", "COST_METRICS_INTERVAL", "the cost metrics are refreshed every 5m"},
	{"image-tag-ttl", "IMAGE_TAG_TTL", "an image named by tag is remembered for 10m"},
	{"image-cache-size", "IMAGE_CACHE_SIZE", "4096 image references are remembered"},
}

// addRetiredFlags keeps the retired settings' flags, hidden: one given prints pflag's
// deprecation notice instead of stopping serve.
func addRetiredFlags(flags *pflag.FlagSet) {
	for _, r := range retiredSettings {
		flags.String(r.key, "", "")
		_ = flags.MarkDeprecated(r.key, "it is ignored: "+r.now) // the flag exists: no error
	}
}

// readRetired notes a warning for each retired setting still set in the environment,
// and for LEDGER, which chose between two ledgers (one remains, exact with any number
// of replicas): its old values start the webhook, anything else is a typo.
func (c *serveConfig) readRetired() error {
	for _, r := range retiredSettings {
		if v, set := os.LookupEnv(r.env); set && strings.TrimSpace(v) != "" {
			c.Deprecations = append(c.Deprecations, fmt.Sprintf("%s=%s is deprecated and ignored: %s", r.env, strings.TrimSpace(v), r.now))
		}
	}
	ledger, set := os.LookupEnv("LEDGER")
	if !set {
		return nil
	}
	switch mode := strings.ToLower(strings.TrimSpace(ledger)); mode {
	case "", "memory", "lease":
		c.Deprecations = append(c.Deprecations, fmt.Sprintf("LEDGER=%s is deprecated and ignored: the one seat ledger keeps its records in the API server and is exact with any number of replicas", mode))
		return nil
	default:
		return fmt.Errorf("LEDGER %q: deprecated setting, leave it unset (memory and lease are accepted and ignored)", mode)
	}
}
