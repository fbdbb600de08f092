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

// cache is a bounded LRU of answers with per-entry expiry. Safe for concurrent use.
type cache struct {
	mu    sync.Mutex
	max   int
	order *list.List // front: most recently used
	byKey map[string]*list.Element
}

func newCache(max int) *cache {
	return &cache{max: max, order: list.New(), byKey: map[string]*list.Element{}}
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
		c.order.Remove(el)
		delete(c.byKey, key)
		return entry{}, false
	}
	c.order.MoveToFront(el)
	return *e, true
}

// put stores e, evicting the least recently used entry when full.
func (c *cache) put(e entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[e.key]; ok {
		*el.Value.(*entry) = e
		c.order.MoveToFront(el)
		return
	}
	for c.order.Len() >= c.max {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.byKey, oldest.Value.(*entry).key)
	}
	c.byKey[e.key] = c.order.PushFront(&e)
}

// len is the number of entries, expired ones included until they are looked at.
func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
