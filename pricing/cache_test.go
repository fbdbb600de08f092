package pricing

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// counting is a Source that counts its lookups and prices by a map.
type counting struct {
	prices map[Key]float64
	calls  int
}

func (c *counting) Price(_ context.Context, k Key) (float64, error) {
	c.calls++
	if p, ok := c.prices[k]; ok {
		return p, nil
	}
	return 0, ErrNoPrice
}

func TestDiskCacheKeepsPricesForTheTTL(t *testing.T) {
	k := Key{InstanceType: "m5.large", CapacityType: Spot, Zone: "eu-west-1a"}
	src := &counting{prices: map[Key]float64{k: 0.04}}
	path := filepath.Join(t.TempDir(), "sub", "prices.json")
	now := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	c := NewDiskCache(src, path, time.Hour)
	c.now = func() time.Time { return now }
	ctx := context.Background()
	for range 3 {
		if p, err := c.Price(ctx, k); err != nil || p != 0.04 {
			t.Fatalf("Price = %v, %v", p, err)
		}
	}
	if src.calls != 1 || c.WriteErr != nil {
		t.Fatalf("source asked %d times (want 1), write error %v", src.calls, c.WriteErr)
	}
	// A second process reads the file.
	c2 := NewDiskCache(src, path, time.Hour)
	c2.now = func() time.Time { return now.Add(59 * time.Minute) }
	if p, err := c2.Price(ctx, k); err != nil || p != 0.04 || src.calls != 1 {
		t.Fatalf("from the file: %v, %v, source asked %d times", p, err, src.calls)
	}
	// Past the TTL the source is asked again, and its new price kept.
	src.prices[k] = 0.05
	c2.now = func() time.Time { return now.Add(61 * time.Minute) }
	if p, err := c2.Price(ctx, k); err != nil || p != 0.05 || src.calls != 2 {
		t.Fatalf("after the TTL: %v, %v, source asked %d times", p, err, src.calls)
	}
}

func TestDiskCacheNeverKeepsFailuresAndSurvivesABadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(path, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	k := Key{InstanceType: "x9.huge", CapacityType: OnDemand, Region: "eu-west-1"}
	src := &counting{prices: map[Key]float64{}}
	c := NewDiskCache(src, path, 0)
	for range 2 {
		if _, err := c.Price(context.Background(), k); !errors.Is(err, ErrNoPrice) {
			t.Fatalf("err = %v, want ErrNoPrice", err)
		}
	}
	if src.calls != 2 {
		t.Fatalf("source asked %d times, want 2 (failures are not cached)", src.calls)
	}
	src.prices[k] = 1.5
	if p, err := c.Price(context.Background(), k); err != nil || p != 1.5 || c.WriteErr != nil {
		t.Fatalf("over a corrupt file: %v, %v, write %v", p, err, c.WriteErr)
	}
}

func TestDiskCacheUnwritableStillAnswers(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	k := Key{InstanceType: "m5.large", CapacityType: OnDemand}
	c := NewDiskCache(&counting{prices: map[Key]float64{k: 0.1}}, filepath.Join(blocker, "prices.json"), 0)
	if p, err := c.Price(context.Background(), k); err != nil || p != 0.1 {
		t.Fatalf("Price = %v, %v", p, err)
	}
	if c.WriteErr == nil {
		t.Fatal("no write error reported for a cache under a regular file")
	}
}

func TestSummarizeAndMemo(t *testing.T) {
	s, ok := Summarize(map[string]float64{"a": 3, "b": 1, "c": 2, "d": 10})
	if !ok || s.Cheapest != 1 || s.CheapestType != "b" || s.Median != 2.5 || s.Priced != 4 {
		t.Fatalf("Summarize = %+v, %v", s, ok)
	}
	if _, ok := Summarize(nil); ok {
		t.Fatal("a summary of nothing")
	}
	k := Key{InstanceType: "m5.large", CapacityType: OnDemand}
	src := &counting{prices: map[Key]float64{k: 0.1}}
	m := NewMemo(src)
	for range 3 {
		_, _ = m.Price(context.Background(), k)
		_, _ = m.Price(context.Background(), Key{InstanceType: "nope", CapacityType: Spot})
	}
	if src.calls != 2 {
		t.Fatalf("memo asked the source %d times, want 2", src.calls)
	}
}
