package pricing

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/awsfake"
)

// awsEnv points the SDK's default chain at test credentials and nothing else.
func awsEnv(t *testing.T, withCredentials bool) {
	t.Helper()
	dir := t.TempDir()
	key, secret := "AKIDTEST", "secret"
	if !withCredentials {
		key, secret = "", ""
	}
	t.Setenv("AWS_ACCESS_KEY_ID", key)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_ENDPOINT_URL", "")
}

func testPrices() awsfake.Prices {
	return awsfake.Prices{
		OnDemand: map[string]map[string]float64{"eu-west-1": {"m5.large": 0.107, "c5.xlarge": 0.192}},
		Spot: map[string]map[string]float64{
			"eu-west-1a": {"m5.large": 0.041}, "eu-west-1b": {"m5.large": 0.038}, "eu-west-1c": {"c5.xlarge": 0.07},
		},
	}
}

func newTestAWS(t *testing.T, fake *awsfake.Server) *AWS {
	t.Helper()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	a, err := NewAWS(context.Background(), AWSOptions{PricingEndpoint: srv.URL, EC2Endpoint: srv.URL, RetryMaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestAWSPricesThroughTheSDK(t *testing.T) {
	awsEnv(t, true)
	fake := awsfake.New(testPrices())
	a := newTestAWS(t, fake)
	ctx := context.Background()
	cases := []struct {
		key  Key
		want float64
	}{
		{Key{InstanceType: "m5.large", CapacityType: OnDemand}, 0.107},
		{Key{InstanceType: "c5.xlarge", CapacityType: OnDemand, Zone: "eu-west-1c"}, 0.192},
		{Key{InstanceType: "m5.large", CapacityType: Spot, Zone: "eu-west-1a"}, 0.041},
		// No zone: the lowest of the region's zones.
		{Key{InstanceType: "m5.large", CapacityType: Spot, Region: "eu-west-1"}, 0.038},
	}
	for _, c := range cases {
		got, err := a.Price(ctx, c.key)
		if err != nil || got != c.want {
			t.Errorf("Price(%s) = %v, %v; want %v", c.key, got, err, c.want)
		}
	}
	if fake.Calls("GetProducts") != 2 || fake.Calls("DescribeSpotPriceHistory") != 2 {
		t.Fatalf("calls: GetProducts %d, DescribeSpotPriceHistory %d; want 2 and 2", fake.Calls("GetProducts"), fake.Calls("DescribeSpotPriceHistory"))
	}
}

func TestAWSUnknownInstanceTypeIsNoPriceAndNotFatal(t *testing.T) {
	awsEnv(t, true)
	a := newTestAWS(t, awsfake.New(testPrices()))
	ctx := context.Background()
	for _, k := range []Key{{InstanceType: "x9.huge", CapacityType: OnDemand}, {InstanceType: "x9.huge", CapacityType: Spot, Zone: "eu-west-1a"}} {
		_, err := a.Price(ctx, k)
		if !errors.Is(err, ErrNoPrice) || !strings.Contains(err.Error(), "x9.huge") || !strings.Contains(err.Error(), "unknown instance type") {
			t.Errorf("Price(%s) err = %v, want ErrNoPrice naming the type", k, err)
		}
	}
	// An unknown type says nothing about AWS as a whole: the next lookup still asks.
	if p, err := a.Price(ctx, Key{InstanceType: "m5.large", CapacityType: OnDemand}); err != nil || p != 0.107 {
		t.Fatalf("after an unknown type: %v, %v", p, err)
	}
}

func TestAWSWithoutCredentialsSaysSoOnce(t *testing.T) {
	awsEnv(t, false)
	fake := awsfake.New(testPrices())
	a := newTestAWS(t, fake)
	_, err := a.Price(context.Background(), Key{InstanceType: "m5.large", CapacityType: OnDemand})
	if err == nil || !strings.Contains(err.Error(), "no usable AWS credentials") || !strings.Contains(err.Error(), "--prices FILE") {
		t.Fatalf("err = %v, want advice about credentials", err)
	}
	_, err = a.Price(context.Background(), Key{InstanceType: "m5.large", CapacityType: Spot, Zone: "eu-west-1a"})
	if err == nil || !strings.Contains(err.Error(), "credentials") {
		t.Fatalf("second lookup err = %v, want the same failure", err)
	}
	if n := fake.Calls("GetProducts") + fake.Calls("DescribeSpotPriceHistory"); n != 0 {
		t.Fatalf("%d unsigned calls reached AWS", n)
	}
}

func TestAWSUnreachableFailsFastAfterTheFirstTimeout(t *testing.T) {
	awsEnv(t, true)
	// A listener that accepts and never answers: AWS unreachable behind a firewall.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	url := "http://" + ln.Addr().String()
	a, err := NewAWS(context.Background(), AWSOptions{PricingEndpoint: url, EC2Endpoint: url, Timeout: 300 * time.Millisecond, RetryMaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = a.Price(context.Background(), Key{InstanceType: "m5.large", CapacityType: OnDemand})
	if err == nil || !strings.Contains(err.Error(), "did not answer in time") {
		t.Fatalf("err = %v, want a timeout with advice", err)
	}
	for range 5 {
		if _, err := a.Price(context.Background(), Key{InstanceType: "c5.xlarge", CapacityType: Spot}); err == nil {
			t.Fatal("a price from an unreachable AWS")
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("six lookups took %s: later ones should fail at once", d)
	}
}

func TestAWSServerErrorIsReported(t *testing.T) {
	awsEnv(t, true)
	fake := awsfake.New(testPrices())
	fake.SetFailing(true)
	a := newTestAWS(t, fake)
	_, err := a.Price(context.Background(), Key{InstanceType: "m5.large", CapacityType: Spot, Zone: "eu-west-1a"})
	if err == nil || !strings.Contains(err.Error(), "DescribeSpotPriceHistory") || !strings.Contains(err.Error(), "InternalError") {
		t.Fatalf("err = %v, want EC2's error code", err)
	}
}

// FreshAWS without a price file asks AWS through the SDK's default chain, behind the
// disk cache: a source made for the next refresh answers known keys from the cache. With
// a price file's table, the table is every refresh's source.
func TestFreshAWS(t *testing.T) {
	fake := awsfake.StartForTest(t, awsfake.Prices{
		OnDemand: map[string]map[string]float64{"eu-west-1": {"m5.large": 0.107}},
		Spot:     map[string]map[string]float64{"eu-west-1a": {"m5.large": 0.041}},
	})
	cache := filepath.Join(t.TempDir(), "prices.json")
	prices := FreshAWS(nil, cache)
	ctx := context.Background()
	keys := map[Key]float64{
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
			if _, err := os.Stat(cache); err != nil {
				t.Fatalf("no disk cache: %v", err)
			}
		}
	}
	if calls := fake.Calls("GetProducts") + fake.Calls("DescribeSpotPriceHistory"); calls > 2 {
		t.Errorf("%d calls to AWS, want the first refresh's 2 only (then the cache)", calls)
	}
	table, err := ParseTable(strings.NewReader("m5.large spot eu-west-1a 0.03\n"))
	if err != nil {
		t.Fatal(err)
	}
	if src, err := FreshAWS(table, cache)(ctx); err != nil || src != Source(table) {
		t.Fatalf("with a price file: %v, %v; want its table", src, err)
	}
}
