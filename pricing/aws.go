package pricing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	awspricing "github.com/aws/aws-sdk-go-v2/service/pricing"
	pricingtypes "github.com/aws/aws-sdk-go-v2/service/pricing/types"
)

// PriceListRegion is where the AWS Price List API is served from (it also answers in
// eu-central-1 and ap-south-1; every endpoint has the prices of every region).
const PriceListRegion = "us-east-1"

// DefaultTimeout bounds one lookup, retries included.
const DefaultTimeout = 15 * time.Second

// AWSOptions configure NewAWS. The zero value takes everything from the SDK's default
// chain; endpoints follow AWS_ENDPOINT_URL_PRICING and AWS_ENDPOINT_URL_EC2 too.
type AWSOptions struct {
	// Region of the cluster (its nodes' region when they do not say); the SDK's
	// default region when empty.
	Region string
	// PricingEndpoint and EC2Endpoint override the service endpoints (tests).
	PricingEndpoint, EC2Endpoint string
	// Timeout bounds one lookup; DefaultTimeout when zero.
	Timeout time.Duration
	// RetryMaxAttempts overrides the SDK's attempts when > 0.
	RetryMaxAttempts int
}

// AWS is a Source reading the Price List API (on-demand) and EC2's spot price history.
// After a failure that is not about one key (no credentials, AWS unreachable, access
// denied) it answers every later lookup with that failure at once, so a report over a
// hundred nodes does not wait a hundred timeouts. Safe for concurrent use.
type AWS struct {
	pricing *awspricing.Client
	ec2     *ec2.Client
	region  string
	timeout time.Duration

	mu   sync.Mutex
	down error
}

// NewAWS builds the clients; nothing is sent before the first Price.
func NewAWS(ctx context.Context, o AWSOptions) (*AWS, error) {
	var loadOpts []func(*config.LoadOptions) error
	if o.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(o.Region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	a := &AWS{region: cfg.Region, timeout: o.Timeout}
	if a.timeout <= 0 {
		a.timeout = DefaultTimeout
	}
	a.pricing = awspricing.NewFromConfig(cfg, func(po *awspricing.Options) {
		po.Region = PriceListRegion
		if o.PricingEndpoint != "" {
			po.BaseEndpoint = aws.String(o.PricingEndpoint)
		}
		if o.RetryMaxAttempts > 0 {
			po.RetryMaxAttempts = o.RetryMaxAttempts
		}
	})
	a.ec2 = ec2.NewFromConfig(cfg, func(eo *ec2.Options) {
		if o.EC2Endpoint != "" {
			eo.BaseEndpoint = aws.String(o.EC2Endpoint)
		}
		if o.RetryMaxAttempts > 0 {
			eo.RetryMaxAttempts = o.RetryMaxAttempts
		}
	})
	return a, nil
}

// Price implements Source.
func (a *AWS) Price(ctx context.Context, k Key) (float64, error) {
	if err := k.Validate(); err != nil {
		return 0, err
	}
	if k.Region == "" {
		k.Region = a.region
	}
	if k.Region == "" && k.Zone == "" {
		return 0, fmt.Errorf("%s: no region: set AWS_REGION or label the nodes with topology.kubernetes.io/region", k)
	}
	a.mu.Lock()
	down := a.down
	a.mu.Unlock()
	if down != nil {
		return 0, fmt.Errorf("%s: %w", k, down)
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	var p float64
	var err error
	if k.CapacityType == OnDemand {
		p, err = a.onDemand(ctx, k)
	} else {
		p, err = a.spot(ctx, k)
	}
	if err != nil && !errors.Is(err, ErrNoPrice) {
		err = explain(err)
		a.mu.Lock()
		a.down = err
		a.mu.Unlock()
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", k, err)
	}
	return p, nil
}

// explain turns the SDK's failures that concern every lookup into advice.
func explain(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("AWS did not answer in time (unreachable? use --prices FILE where AWS cannot be reached): %w", err)
	case strings.Contains(err.Error(), "credentials"):
		return fmt.Errorf("no usable AWS credentials (set AWS_PROFILE or AWS_ACCESS_KEY_ID, or use --prices FILE): %w", err)
	}
	return fmt.Errorf("asking AWS: %w", err)
}

// onDemand asks the Price List API for the Linux, shared-tenancy, no-license price of
// the instance type in the key's region; the lowest positive one when several match.
func (a *AWS) onDemand(ctx context.Context, k Key) (float64, error) {
	region := k.Region
	if region == "" {
		region = regionOfZone(k.Zone)
	}
	term := func(field, value string) pricingtypes.Filter {
		return pricingtypes.Filter{Field: aws.String(field), Type: pricingtypes.FilterTypeTermMatch, Value: aws.String(value)}
	}
	in := &awspricing.GetProductsInput{
		ServiceCode:   aws.String("AmazonEC2"),
		FormatVersion: aws.String("aws_v1"),
		Filters: []pricingtypes.Filter{
			term("instanceType", k.InstanceType), term("regionCode", region),
			term("operatingSystem", "Linux"), term("tenancy", "Shared"),
			term("preInstalledSw", "NA"), term("capacitystatus", "Used"),
		},
	}
	best := 0.0
	pages := awspricing.NewGetProductsPaginator(a.pricing, in)
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return 0, fmt.Errorf("pricing GetProducts: %w", err)
		}
		for _, doc := range out.PriceList {
			p, err := onDemandPrice(doc)
			if err != nil {
				return 0, err
			}
			if p > 0 && (best == 0 || p < best) {
				best = p
			}
		}
	}
	if best == 0 {
		return 0, fmt.Errorf("%w: the Price List API knows no on-demand Linux price for %s in %s (unknown instance type?)", ErrNoPrice, k.InstanceType, region)
	}
	return best, nil
}

// product is the part of a Price List document that holds on-demand prices.
type product struct {
	Terms struct {
		OnDemand map[string]struct {
			PriceDimensions map[string]struct {
				Unit         string            `json:"unit"`
				PricePerUnit map[string]string `json:"pricePerUnit"`
			} `json:"priceDimensions"`
		} `json:"OnDemand"`
	} `json:"terms"`
}

// onDemandPrice reads the hourly USD price of one Price List document (0 if none).
func onDemandPrice(doc string) (float64, error) {
	var p product
	if err := json.Unmarshal([]byte(doc), &p); err != nil {
		return 0, fmt.Errorf("reading a Price List document: %w", err)
	}
	for _, offer := range p.Terms.OnDemand {
		for _, dim := range offer.PriceDimensions {
			if dim.Unit != "Hrs" {
				continue
			}
			usd, err := strconv.ParseFloat(dim.PricePerUnit["USD"], 64)
			if err != nil || usd < 0 {
				return 0, fmt.Errorf("reading a Price List document: USD price %q", dim.PricePerUnit["USD"])
			}
			return usd, nil
		}
	}
	return 0, nil
}

// spot reads the current spot price of the instance type: in the key's zone, or the
// lowest over the region's zones when the key names none.
func (a *AWS) spot(ctx context.Context, k Key) (float64, error) {
	in := &ec2.DescribeSpotPriceHistoryInput{
		InstanceTypes:       []ec2types.InstanceType{ec2types.InstanceType(k.InstanceType)},
		ProductDescriptions: []string{"Linux/UNIX"},
		StartTime:           aws.Time(time.Now()),
	}
	if k.Zone != "" {
		in.AvailabilityZone = aws.String(k.Zone)
	}
	region := k.Region
	if region == "" {
		region = regionOfZone(k.Zone)
	}
	type seen struct {
		at    time.Time
		price float64
	}
	latest := map[string]seen{}
	pages := ec2.NewDescribeSpotPriceHistoryPaginator(a.ec2, in)
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx, func(eo *ec2.Options) { eo.Region = region })
		if err != nil {
			return 0, fmt.Errorf("ec2 DescribeSpotPriceHistory: %w", err)
		}
		for _, sp := range out.SpotPriceHistory {
			p, err := strconv.ParseFloat(aws.ToString(sp.SpotPrice), 64)
			if err != nil || p < 0 {
				return 0, fmt.Errorf("ec2 DescribeSpotPriceHistory: spot price %q", aws.ToString(sp.SpotPrice))
			}
			zone, at := aws.ToString(sp.AvailabilityZone), aws.ToTime(sp.Timestamp)
			if cur, ok := latest[zone]; !ok || at.After(cur.at) {
				latest[zone] = seen{at, p}
			}
		}
	}
	best := -1.0
	for _, s := range latest {
		if best < 0 || s.price < best {
			best = s.price
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("%w: EC2 has no spot price history for %s in %s (unknown instance type, or not sold as spot there?)", ErrNoPrice, k.InstanceType, k.where())
	}
	return best, nil
}

// where is the key's zone, or else its region.
func (k Key) where() string {
	if k.Zone != "" {
		return k.Zone
	}
	return k.Region
}

// regionOfZone drops an AWS zone's letter ("us-east-1a" -> "us-east-1").
func regionOfZone(zone string) string {
	if n := len(zone); n > 1 && zone[n-1] >= 'a' && zone[n-1] <= 'z' && zone[n-2] >= '0' && zone[n-2] <= '9' {
		return zone[:n-1]
	}
	return zone
}
