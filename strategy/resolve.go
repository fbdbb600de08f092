package strategy

import "sync"

// Resolved is the strategy that applies to a pod or a workload: where it stands
// (Source) and, when it is active, the parsed strategy or why it does not parse.
type Resolved struct {
	Source
	// Strategy is the parsed strategy; nil when none is active or it is invalid.
	Strategy *Strategy
	// Err is the parser's error for an active strategy that does not parse.
	Err error
}

// Resolver finds the strategy of an ownership chain and parses it: the one way every
// reader (admission, validation, the convergence loop, spread and plan) turns
// annotations into a strategy. It keeps parsed strategies by annotation value, so a
// strategy is parsed once and its seat prefix (seats.go) serves every pod of its
// workloads. The zero value is ready to use and safe for concurrent use; a nil
// *Resolver parses every time.
type Resolver struct {
	mu      sync.Mutex
	entries map[string]parsed
}

// resolverSize bounds the strategies a Resolver keeps: far more than the distinct
// strategies of a cluster, a bounded amount of annotation text.
const resolverSize = 256

type parsed struct {
	s   *Strategy
	err error
}

// Resolve walks chain (most specific first: the pod or pod template, then its
// workloads) as Find does and parses the strategy found.
func (r *Resolver) Resolve(chain ...AnnotatedObject) Resolved {
	res := Resolved{Source: Find(chain...)}
	if res.Active() {
		res.Strategy, res.Err = r.Parse(res.Raw)
	}
	return res
}

// Resolve is Resolver.Resolve without a cache, for readers that resolve each workload
// once (spread, plan).
func Resolve(chain ...AnnotatedObject) Resolved { return (*Resolver)(nil).Resolve(chain...) }

// Parse is Parse through the resolver's cache. The *Strategy it returns is shared:
// callers must not modify it.
func (r *Resolver) Parse(raw string) (*Strategy, error) {
	if r == nil {
		return Parse(raw)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.entries[raw]; ok {
		return p.s, p.err
	}
	s, err := Parse(raw)
	if r.entries == nil {
		r.entries = map[string]parsed{}
	}
	if len(r.entries) >= resolverSize {
		for k := range r.entries { // evict one, any one: a miss only costs a parse
			delete(r.entries, k)
			break
		}
	}
	r.entries[raw] = parsed{s: s, err: err}
	return s, err
}
