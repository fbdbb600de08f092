package nodegroups

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/eks"
)

// ClientOptions tune the EKS client built by NewClient. The zero value uses
// the SDK defaults throughout.
type ClientOptions struct {
	// Region overrides the region of the default chain (AWS_REGION, shared
	// config, IMDS) when not empty.
	Region string
	// Endpoint overrides the EKS endpoint URL when not empty (tests, VPC
	// endpoints).
	Endpoint string
	// RetryMaxAttempts overrides the SDK's retry attempts (3) when > 0.
	RetryMaxAttempts int
}

// NewClient builds an EKS client with credentials and region from the SDK's
// default chain (environment, shared config and credentials files, web
// identity / IRSA, Pod Identity, IMDS). optFns are applied last and let
// callers adjust anything else, such as the retryer.
func NewClient(ctx context.Context, o ClientOptions, optFns ...func(*eks.Options)) (*eks.Client, error) {
	var loadOpts []func(*config.LoadOptions) error
	if o.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(o.Region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("loading AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return nil, fmt.Errorf("no AWS region configured (set AWS_REGION or a region in the shared config)")
	}
	fns := make([]func(*eks.Options), 0, len(optFns)+1)
	fns = append(fns, func(eo *eks.Options) {
		if o.Endpoint != "" {
			eo.BaseEndpoint = aws.String(o.Endpoint)
		}
		if o.RetryMaxAttempts > 0 {
			eo.RetryMaxAttempts = o.RetryMaxAttempts
		}
	})
	fns = append(fns, optFns...)
	return eks.NewFromConfig(cfg, fns...), nil
}
