package imagearch

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Limits of the registry lookups in flight. A registry that never answers holds at
// most perRegistrySlots of the slots, and one namespace at most perNamespaceSlots, so
// another tenant's images on a healthy registry are still read.
const (
	maxConcurrentFetches = 16
	perRegistrySlots     = 4
	perNamespaceSlots    = 8
	// perRegistryQueue and perNamespaceQueue bound the lookups waiting for (or holding)
	// a slot: past them a lookup is refused at once, so many distinct tags of one
	// registry or namespace cost goroutines in bounded number.
	perRegistryQueue  = 32
	perNamespaceQueue = 64
)

// errBusy is a lookup refused or timed out before it reached its registry: it says
// nothing about the registry, so it is never remembered as the registry's failure.
var errBusy = errors.New("too many image lookups in flight")

// slots hands out lookup slots fairly: one per lookup, under a per-registry, a
// per-namespace and a global limit. Safe for concurrent use.
type slots struct {
	global chan struct{}
	mu     sync.Mutex
	keys   map[string]*keySlots // "r/<registry>" and "n/<namespace>"; dropped when unused
}

// keySlots are one registry's or namespace's slots and how many lookups use them.
type keySlots struct {
	ch    chan struct{}
	users int
}

func newSlots() *slots {
	return &slots{global: make(chan struct{}, maxConcurrentFetches), keys: map[string]*keySlots{}}
}

// join counts a lookup under key, or refuses it past queue.
func (s *slots) join(key string, size, queue int) (*keySlots, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys[key]
	if k == nil {
		k = &keySlots{ch: make(chan struct{}, size)}
		s.keys[key] = k
	}
	if k.users >= queue {
		return nil, false
	}
	k.users++
	return k, true
}

// leave un-counts a lookup under key.
func (s *slots) leave(key string, k *keySlots) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k.users--; k.users == 0 {
		delete(s.keys, key)
	}
}

// acquire waits for a slot of namespace, of registry and a global one, in that order
// (a lookup waiting for its namespace holds no registry's slot, and one waiting for its
// registry no global slot), until ctx ends. The error
// wraps errBusy; release gives the slots back.
func (s *slots) acquire(ctx context.Context, registry, namespace string) (release func(), err error) {
	rk, nk := "r/"+registry, "n/"+namespace
	r, ok := s.join(rk, perRegistrySlots, perRegistryQueue)
	if !ok {
		return nil, fmt.Errorf("%w: %d lookups of registry %s already wait", errBusy, perRegistryQueue, registry)
	}
	n, ok := s.join(nk, perNamespaceSlots, perNamespaceQueue)
	if !ok {
		s.leave(rk, r)
		return nil, fmt.Errorf("%w: %d lookups of namespace %s already wait", errBusy, perNamespaceQueue, namespace)
	}
	var held []chan struct{}
	release = func() {
		for _, ch := range held {
			<-ch
		}
		s.leave(nk, n)
		s.leave(rk, r)
	}
	for _, ch := range []chan struct{}{n.ch, r.ch, s.global} {
		select {
		case ch <- struct{}{}:
			held = append(held, ch)
		case <-ctx.Done():
			release()
			return nil, fmt.Errorf("%w: no free lookup slot in time (%w)", errBusy, ctx.Err())
		}
	}
	return release, nil
}
