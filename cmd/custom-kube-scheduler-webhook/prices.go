package main

import (
	"context"
	"time"

	"github.com/spf13/pflag"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
)

// costFlags are the --cost flags of spread and plan.
type costFlags struct {
	enabled      bool
	file, cache  string
	ttl          time.Duration
	region       string
	awsTimeout   time.Duration
	noPriceCache bool
}

func (c *costFlags) register(f *pflag.FlagSet) {
	f.BoolVar(&c.enabled, "cost", false, "add the hourly cost per term and the saving against all on-demand (prices from AWS, or --prices)")
	f.StringVar(&c.file, "prices", "", "price file to use instead of AWS (lines: instance-type capacity-type zone|region|* usd-per-hour)")
	f.StringVar(&c.cache, "price-cache", "", "file that caches prices read from AWS (default: prices.json in the user cache directory)")
	f.BoolVar(&c.noPriceCache, "no-price-cache", false, "ask AWS every time; keep no cache file")
	f.DurationVar(&c.ttl, "price-ttl", pricing.DefaultTTL, "how long a cached price is used")
	f.StringVar(&c.region, "region", "", "AWS region of the cluster, for nodes without a region label (default: the AWS SDK's, e.g. AWS_REGION)")
	f.DurationVar(&c.awsTimeout, "aws-timeout", pricing.DefaultTimeout, "how long one price lookup may take before AWS counts as unreachable")
}

// validate checks the flags that need no I/O.
func (c *costFlags) validate() error {
	if c.ttl <= 0 {
		return usageError("--price-ttl must be positive, got %s", c.ttl)
	}
	if c.awsTimeout <= 0 {
		return usageError("--aws-timeout must be positive, got %s", c.awsTimeout)
	}
	if c.file != "" && !c.enabled {
		return usageError("--prices needs --cost")
	}
	return nil
}

// source is the price file, or AWS behind the disk cache. Endpoints follow the SDK's
// settings (AWS_ENDPOINT_URL_PRICING, AWS_ENDPOINT_URL_EC2).
func (c *costFlags) source(ctx context.Context) (pricing.Source, error) {
	if c.file != "" {
		t, err := pricing.LoadFile(c.file)
		if err != nil {
			return nil, usageError("%w", err)
		}
		return t, nil
	}
	aws, err := pricing.NewAWS(ctx, pricing.AWSOptions{Region: c.region, Timeout: c.awsTimeout})
	if err != nil {
		return nil, err
	}
	if c.noPriceCache {
		return aws, nil
	}
	path := c.cache
	if path == "" {
		if path, err = pricing.DefaultCachePath(); err != nil {
			return aws, nil
		}
	}
	return pricing.NewDiskCache(aws, path, c.ttl), nil
}
