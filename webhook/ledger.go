package webhook

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// Ledger hands out the seats of one workload revision (a ReplicaSet, keyed by its UID).
//
// Admissions of one ReplicaSet burst arrive concurrently and before any of the new pods
// is visible, so seats held by live pods are not enough: a ledger also keeps short-lived
// reservations for pods it admitted but has not seen yet.
type Ledger interface {
	// Claim returns the lowest seat of revision that no live pod holds and no other
	// admission has reserved, and reserves it for admission. Claiming again with the same
	// admission UID (the API server retrying a call) returns the same seat.
	Claim(ctx context.Context, revision, admission types.UID) (int, error)
	// Peek returns the seat Claim would hand out now, reserving nothing (dry-run).
	Peek(ctx context.Context, revision types.UID) (int, error)
	// Release gives back a seat claimed by admission whose pod will not carry it.
	Release(ctx context.Context, revision, admission types.UID)
}

// HeldSeats reports the seats held by the live pods of a revision: pods that carry the
// seat annotation and are neither terminating nor finished.
type HeldSeats interface {
	Held(revision types.UID) map[int]bool
}

type reservation struct {
	seat    int
	expires time.Time
}

// MemoryLedger is a Ledger for one webhook replica: seats held by pods come from a
// HeldSeats view of the API server (so the state survives a restart), reservations live
// in memory until the pod shows up in that view or the reservation expires.
type MemoryLedger struct {
	held HeldSeats
	ttl  time.Duration
	now  func() time.Time

	mu sync.Mutex
	// reservations[revision][admission UID]
	reservations map[types.UID]map[types.UID]reservation
}

// NewMemoryLedger returns a ledger whose reservations last ttl: long enough for the API
// server to persist an admitted pod and for the pod informer to see it.
func NewMemoryLedger(held HeldSeats, ttl time.Duration) *MemoryLedger {
	return &MemoryLedger{held: held, ttl: ttl, now: time.Now, reservations: map[types.UID]map[types.UID]reservation{}}
}

// Claim implements Ledger.
func (l *MemoryLedger) Claim(_ context.Context, revision, admission types.UID) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	taken := l.takenLocked(revision)
	if r, ok := l.reservations[revision][admission]; ok {
		return r.seat, nil
	}
	seat := strategy.LowestFreeSeat(taken)
	if l.reservations[revision] == nil {
		l.reservations[revision] = map[types.UID]reservation{}
	}
	l.reservations[revision][admission] = reservation{seat: seat, expires: l.now().Add(l.ttl)}
	return seat, nil
}

// Peek implements Ledger.
func (l *MemoryLedger) Peek(_ context.Context, revision types.UID) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strategy.LowestFreeSeat(l.takenLocked(revision)), nil
}

// Release implements Ledger.
func (l *MemoryLedger) Release(_ context.Context, revision, admission types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.reservations[revision], admission)
	if len(l.reservations[revision]) == 0 {
		delete(l.reservations, revision)
	}
}

// Reservations returns how many seats are reserved and not yet seen on a pod.
func (l *MemoryLedger) Reservations() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, rs := range l.reservations {
		n += len(rs)
	}
	return n
}

// takenLocked returns held ∪ reserved seats of revision, dropping reservations that
// expired or whose pod is now visible (so a pod deleted right after creation frees its
// seat at once instead of at expiry).
func (l *MemoryLedger) takenLocked(revision types.UID) map[int]bool {
	taken := l.held.Held(revision)
	if taken == nil {
		taken = map[int]bool{}
	}
	now := l.now()
	for uid, r := range l.reservations[revision] {
		if taken[r.seat] || now.After(r.expires) {
			delete(l.reservations[revision], uid)
			continue
		}
		taken[r.seat] = true
	}
	if len(l.reservations[revision]) == 0 {
		delete(l.reservations, revision)
	}
	return taken
}
