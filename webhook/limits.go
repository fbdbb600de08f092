package webhook

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/sync/semaphore"
)

// MaxBodyBytes caps one AdmissionReview. The API server refuses write requests over
// 3 MiB (its MaxRequestBodyBytes), and etcd stores objects of at most 1.5 MiB, so a
// pod CREATE review carries at most a 3 MiB object plus the review's envelope (UID,
// kind, resource, the user's name, groups and extra), which 64 KiB covers with room.
// A workload UPDATE carries the stored old object too (<= 1.5 MiB in etcd). A bigger
// body gets 413 before it is read: the API server then applies the failure policy.
const MaxBodyBytes = 3<<20 + 64<<10

// Defaults of AdmissionLimits. The count is generous because the bytes bound memory,
// and the claims of a revision in flight at once share one seat-record write: a larger
// count ran real admissions faster and with a lower p99 in `make bench` (figures in
// docs/performance.md).
const (
	DefaultMaxInFlight      = 256
	DefaultMaxInFlightBytes = 24 << 20
	DefaultQueueWait        = time.Second
)

// AdmissionLimits bound the work admissions may take at once, so a flood of requests
// (or of maximum-size bodies) cannot push the webhook over its memory limit or make
// every admission late. A request that finds no room within QueueWait is answered 429
// before its body is read: the API server then applies the webhook's failure policy
// (Ignore: the pod is admitted unplaced and the convergence loop places it later; Fail:
// the pod is refused and its controller retries). A body cannot be answered "allowed
// with a warning" without reading it: the response must carry the request's UID.
type AdmissionLimits struct {
	// MaxInFlight is how many admissions are handled at once.
	MaxInFlight int
	// MaxInFlightBytes bounds the sum of the bodies being read and handled; a body
	// without a declared length counts as MaxBodyBytes. Decoding a review takes
	// about three times its size in heap, so this bounds admission memory.
	MaxInFlightBytes int64
	// QueueWait is how long a request waits for room before it is refused with 429.
	QueueWait time.Duration
}

// admissionGate enforces AdmissionLimits.
type admissionGate struct {
	slots *semaphore.Weighted
	bytes *semaphore.Weighted
	max   int64
	wait  time.Duration
}

func newAdmissionGate(l AdmissionLimits) *admissionGate {
	if l.MaxInFlight <= 0 {
		l.MaxInFlight = DefaultMaxInFlight
	}
	if l.MaxInFlightBytes <= 0 {
		l.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	if l.MaxInFlightBytes < MaxBodyBytes {
		// One maximum-size review must always fit.
		l.MaxInFlightBytes = MaxBodyBytes
	}
	if l.QueueWait <= 0 {
		l.QueueWait = DefaultQueueWait
	}
	return &admissionGate{
		slots: semaphore.NewWeighted(int64(l.MaxInFlight)),
		bytes: semaphore.NewWeighted(l.MaxInFlightBytes),
		max:   l.MaxInFlightBytes,
		wait:  l.QueueWait,
	}
}

// gateError is why the gate turned a request away, and the status to answer with.
type gateError struct {
	status int
	msg    string
}

func (e *gateError) Error() string { return e.msg }

// enter waits for room for r and returns the function that frees it, or the status to
// answer with when the request is refused.
func (g *admissionGate) enter(ctx context.Context, r *http.Request) (func(), *gateError) {
	weight := int64(MaxBodyBytes)
	if r.ContentLength > MaxBodyBytes {
		return nil, &gateError{http.StatusRequestEntityTooLarge, fmt.Sprintf("AdmissionReview of %d bytes is over the %d-byte limit", r.ContentLength, MaxBodyBytes)}
	}
	if r.ContentLength > 0 {
		weight = r.ContentLength
	}
	ctx, cancel := context.WithTimeout(ctx, g.wait)
	defer cancel()
	if !acquire(ctx, g.slots, 1) {
		return nil, &gateError{http.StatusTooManyRequests, "too many admissions in flight"}
	}
	if !acquire(ctx, g.bytes, weight) {
		g.slots.Release(1)
		return nil, &gateError{http.StatusTooManyRequests, "too many admission bytes in flight"}
	}
	return func() { g.bytes.Release(weight); g.slots.Release(1) }, nil
}

// acquire takes n from sem: at once when there is room, else waiting until ctx ends.
// Semaphore.Acquire alone fails on a context already done even when there is room: on
// a loaded machine, a request whose goroutine got no CPU for QueueWait after its timer
// started was refused with 429 while nothing was queued.
func acquire(ctx context.Context, sem *semaphore.Weighted, n int64) bool {
	return sem.TryAcquire(n) || sem.Acquire(ctx, n) == nil
}

// refuse answers a request the gate turned away; Retry-After lets a client that honours
// it come back when the burst has passed.
func refuse(w http.ResponseWriter, e *gateError) {
	if e.status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", strconv.Itoa(1))
	}
	http.Error(w, e.msg, e.status)
}
