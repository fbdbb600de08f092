// Package pricing owns one concept: the hourly price of an EC2 instance type, on-demand
// or spot, in a region or zone. It answers through a Source:
//
//   - AWS reads on-demand prices from the AWS Price List API (GetProducts) and spot
//     prices from EC2 (DescribeSpotPriceHistory), through aws-sdk-go-v2 clients;
//   - Table serves a price file (--prices FILE) for clusters that cannot reach AWS;
//   - DiskCache keeps answers of another Source in a file for a TTL.
//
// It knows nothing of Kubernetes: callers map nodes and NodePools to Keys. It may import
// the standard library and aws-sdk-go-v2 (config, pricing, ec2) only.
package pricing
