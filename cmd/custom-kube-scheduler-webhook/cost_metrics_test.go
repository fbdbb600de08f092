package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
)

// The price file of COST_PRICES_FILE, read at startup, is the source of every refresh.
func TestCostMetricsFromPriceFile(t *testing.T) {
	for _, s := range serveSettings {
		t.Setenv(s.env, "")
	}
	file := filepath.Join(t.TempDir(), "prices")
	if err := os.WriteFile(file, []byte("m5.large on-demand * 0.1\nm5.large spot eu-west-1a 0.03\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadServeConfig(serveFlags(t, "--cost-metrics=on", "--cost-prices-file", file))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Cost.Enabled || cfg.Cost.Prices == nil {
		t.Fatalf("config: on %v, prices %v", cfg.Cost.Enabled, cfg.Cost.Prices)
	}
	ctx := context.Background()
	src, err := pricing.FreshAWS(cfg.Cost.Prices, "")(ctx)
	if err != nil || src != pricing.Source(cfg.Cost.Prices) {
		t.Fatalf("price source %v, %v: want the price file's table", src, err)
	}
	k := pricing.Key{InstanceType: "m5.large", CapacityType: "spot", Region: "eu-west-1", Zone: "eu-west-1a"}
	if got, err := src.Price(ctx, k); err != nil || got != 0.03 {
		t.Fatalf("%s: %v, %v; want 0.03", k, got, err)
	}
}

// A bad price file stops serve before it starts, naming the setting and the line.
func TestCostPricesFileBadStopsStart(t *testing.T) {
	for _, s := range serveSettings {
		t.Setenv(s.env, "")
	}
	file := filepath.Join(t.TempDir(), "prices")
	if err := os.WriteFile(file, []byte("# ok\nm5.large spot-ish * 0.1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COST_METRICS", "on")
	t.Setenv("COST_PRICES_FILE", file)
	_, err := loadServeConfig(serveFlags(t))
	if err == nil || !strings.Contains(err.Error(), "COST_PRICES_FILE") || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad price file: %v", err)
	}
	out, err := run("serve")
	if exitCode(err) != 2 || !strings.Contains(out, "line 2") {
		t.Fatalf("serve with a bad price file: exit %d\n%s", exitCode(err), out)
	}
	t.Setenv("COST_PRICES_FILE", filepath.Join(t.TempDir(), "missing"))
	if _, err := loadServeConfig(serveFlags(t)); err == nil || !strings.Contains(err.Error(), "COST_PRICES_FILE") {
		t.Fatalf("missing price file: %v", err)
	}
	t.Setenv("COST_METRICS", "off")
	if _, err := loadServeConfig(serveFlags(t)); err == nil || !strings.Contains(err.Error(), "needs COST_METRICS=on") {
		t.Fatalf("price file with the metrics off: %v", err)
	}
}
