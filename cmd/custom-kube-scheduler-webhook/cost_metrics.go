package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
)

// costPriceSource is serve's price source: the price file (COST_PRICES_FILE, loaded
// at startup) or AWS behind a disk cache in the temporary directory (a cache that
// cannot be written is no error: DiskCache then just asks AWS).
func costPriceSource(table *pricing.Table) func(ctx context.Context) (pricing.Source, error) {
	if table != nil {
		return func(context.Context) (pricing.Source, error) { return table, nil }
	}
	return pricing.FreshAWS(filepath.Join(os.TempDir(), component, "prices.json"))
}
