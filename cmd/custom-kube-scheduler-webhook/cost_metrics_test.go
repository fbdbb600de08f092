package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/awsfake"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
)

// serve's price source without a price file asks AWS through the SDK's default chain,
// behind a disk cache in the temporary directory: a source made for the next refresh
// answers known keys from the cache. (report's tests price the cost series through the
// same source.)
func TestCostPriceSourceAWS(t *testing.T) {
	fake := awsfake.StartForTest(t, awsfake.Prices{
		OnDemand: map[string]map[string]float64{"eu-west-1": {"m5.large": 0.107}},
		Spot:     map[string]map[string]float64{"eu-west-1a": {"m5.large": 0.041}},
	})
	prices := costPriceSource(nil)
	ctx := context.Background()
	keys := map[pricing.Key]float64{
		{InstanceType: "m5.large", CapacityType: "on-demand", Region: "eu-west-1"}:                0.107,
		{InstanceType: "m5.large", CapacityType: "spot", Region: "eu-west-1", Zone: "eu-west-1a"}: 0.041,
	}
	for refresh := range 2 {
		src, err := prices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for k, want := range keys {
			if got, err := src.Price(ctx, k); err != nil || got != want {
				t.Fatalf("refresh %d, %s: %v, %v; want %v", refresh, k, got, err, want)
			}
		}
		if refresh == 0 {
			if fake.Calls("GetProducts") == 0 || fake.Calls("DescribeSpotPriceHistory") == 0 {
				t.Fatal("the prices did not come from the AWS endpoint")
			}
			if _, err := os.Stat(filepath.Join(os.TempDir(), component, "prices.json")); err != nil {
				t.Fatalf("no disk cache: %v", err)
			}
		}
	}
	if calls := fake.Calls("GetProducts") + fake.Calls("DescribeSpotPriceHistory"); calls > 2 {
		t.Errorf("%d calls to AWS, want the first refresh's 2 only (then the cache)", calls)
	}
}

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
	src, err := costPriceSource(cfg.Cost.Prices)(ctx)
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
