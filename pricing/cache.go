package pricing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// DefaultTTL is how long DiskCache trusts a price: spot prices move within hours.
const DefaultTTL = 6 * time.Hour

// DiskCache answers from a JSON file what another Source answered less than TTL ago,
// and asks it otherwise. Only prices are kept, never failures. A cache file that cannot
// be read is treated as empty, and one that cannot be written leaves the answer intact:
// the cache never stands in the way of a price. Not safe for concurrent use.
type DiskCache struct {
	next Source
	path string
	ttl  time.Duration
	now  func() time.Time
	// WriteErr is the last failure to write the file, for a caller that reports it.
	WriteErr error
}

type cachedPrice struct {
	Key     Key       `json:"key"`
	USD     float64   `json:"usdPerHour"`
	Fetched time.Time `json:"fetched"`
}

// NewDiskCache caches next in the file at path for ttl (DefaultTTL when zero).
func NewDiskCache(next Source, path string, ttl time.Duration) *DiskCache {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &DiskCache{next: next, path: path, ttl: ttl, now: time.Now}
}

// DefaultCachePath is prices.json in the user's cache directory.
func DefaultCachePath() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("locate the cache directory: %w", err)
	}
	return filepath.Join(dir, "custom-kube-scheduler-webhook", "prices.json"), nil
}

// Price implements Source.
func (c *DiskCache) Price(ctx context.Context, k Key) (float64, error) {
	entries := c.load()
	id := k.String()
	if e, ok := entries[id]; ok && e.Key == k && c.now().Sub(e.Fetched) < c.ttl {
		return e.USD, nil
	}
	p, err := c.next.Price(ctx, k)
	if err != nil {
		return 0, err
	}
	entries[id] = cachedPrice{Key: k, USD: p, Fetched: c.now()}
	c.WriteErr = c.save(entries)
	return p, nil
}

func (c *DiskCache) load() map[string]cachedPrice {
	entries := map[string]cachedPrice{}
	b, err := os.ReadFile(c.path)
	if err != nil {
		return entries
	}
	if json.Unmarshal(b, &entries) != nil {
		return map[string]cachedPrice{}
	}
	return entries
}

// save writes the file whole through a temporary file, so a reader never sees half.
func (c *DiskCache) save(entries map[string]cachedPrice) error {
	b, err := json.MarshalIndent(entries, "", "  ")
	if err != nil {
		return fmt.Errorf("encode price cache: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(c.path), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("price cache: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(c.path), ".prices-*.json")
	if err != nil {
		return fmt.Errorf("price cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("price cache: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("price cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), c.path); err != nil {
		return fmt.Errorf("price cache: %w", err)
	}
	return nil
}

// FreshAWS returns a price source maker for readers that price again and again (serve's
// cost metrics): each call builds a new AWS source, since one that failed stays down,
// behind a DiskCache at path, so that prices read once are not asked again for DefaultTTL
// (a cache that cannot be written is no error: DiskCache then just asks AWS). A price
// file's table, when given (not nil), is the source of every call instead.
func FreshAWS(table *Table, path string) func(ctx context.Context) (Source, error) {
	if table != nil {
		return func(context.Context) (Source, error) { return table, nil }
	}
	return func(ctx context.Context) (Source, error) {
		aws, err := NewAWS(ctx, AWSOptions{})
		if err != nil {
			return nil, err
		}
		return NewDiskCache(aws, path, DefaultTTL), nil
	}
}
