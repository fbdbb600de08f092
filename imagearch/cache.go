package imagearch

import (
	"container/list"
	"sync"
	"time"
)

// entry is one remembered answer: the architectures of a reference, or why they could
// not be read. A zero expires never expires (a digest's answer).
type entry struct {
	key     string
	arches  []string // shared: callers get a copy
	err     error
	expires time.Time
}

// entryOverhead is about what an entry costs beyond its strings (measured by
// BenchmarkCacheMemoryPerEntry: about 280 bytes with a short key).
const entryOverhead = 256

// size is about the bytes e holds.
func (e *entry) size() int {
	n := entryOverhead + len(e.key)
	for _, a := range e.arches {
		n += 16 + len(a)
	}
	if e.err != nil {
		n += len(e.err.Error())
	}
	return n
}

// cache is an LRU of answers with per-entry expiry, bounded in entries and in bytes.
// Safe for concurrent use.
type cache struct {
	mu       sync.Mutex
	max      int
	maxBytes int
	bytes    int
	order    *list.List // front: most recently used
	byKey    map[string]*list.Element
}

func newCache(max, maxBytes int) *cache {
	return &cache{max: max, maxBytes: maxBytes, order: list.New(), byKey: map[string]*list.Element{}}
}

// remove drops el; c.mu is held.
func (c *cache) remove(el *list.Element) {
	e := el.Value.(*entry)
	c.order.Remove(el)
	delete(c.byKey, e.key)
	c.bytes -= e.size()
}

// get returns the live entry of key, dropping it when it has expired.
func (c *cache) get(key string, now time.Time) (entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return entry{}, false
	}
	e := el.Value.(*entry)
	if !e.expires.IsZero() && !now.Before(e.expires) {
		c.remove(el)
		return entry{}, false
	}
	c.order.MoveToFront(el)
	return *e, true
}

// put stores e, evicting the least recently used entries while over either bound. An
// entry larger than the whole byte bound is not kept.
func (c *cache) put(e entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[e.key]; ok {
		c.remove(el)
	}
	size := e.size()
	if size > c.maxBytes {
		return
	}
	for c.order.Len() > 0 && (c.order.Len() >= c.max || c.bytes+size > c.maxBytes) {
		c.remove(c.order.Back())
	}
	c.byKey[e.key] = c.order.PushFront(&e)
	c.bytes += size
}

// size is about the bytes the entries hold.
func (c *cache) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// len is the number of entries, expired ones included until they are looked at.
func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
