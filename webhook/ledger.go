package webhook

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// Revision names one seat sequence: a ReplicaSet, by its namespace and UID. The
// namespace is part of the key so that pods of another namespace naming the
// ReplicaSet's UID in a forged controller reference never count (tenant isolation).
type Revision struct {
	Namespace string
	UID       types.UID
}

// Ledger hands out the seats of workload revisions.
//
// Admissions of one ReplicaSet burst arrive concurrently and before any of the new pods
// is visible, so seats held by live pods are not enough: a ledger also keeps short-lived
// reservations for pods it admitted but has not seen yet.
type Ledger interface {
	// Claim returns the lowest seat of revision that no live pod holds and no other
	// admission has reserved, and reserves it for admission. Claiming again with the same
	// admission UID (the API server retrying a call) returns the same seat.
	Claim(ctx context.Context, revision Revision, admission types.UID) (int, error)
	// Peek returns the seat Claim would hand out now, reserving nothing (dry-run).
	Peek(ctx context.Context, revision Revision) (int, error)
	// Release gives back a seat claimed by admission whose pod will not carry it.
	Release(ctx context.Context, revision Revision, admission types.UID)
}

// Seat records.
const (
	// recordKindSeats is the value of strategy.LabelSeatRecord on seat records. Their
	// strategy.AnnotationReservations lists the reservations: "seat:id-hash:expiry"
	// items separated by commas (hash: 64-bit FNV-1a of the admission UID, base 36;
	// expiry: Unix seconds, base 36), about 25 bytes each.
	recordKindSeats = "seats"
	// maxReservations keeps a record's annotation under the API server's 256 KiB limit
	// for all annotations of an object.
	maxReservations = 9000
	// maxWriteAttempts bounds the conflicts one batch retries before its claims fail
	// (the pods are then admitted unplaced, with a warning).
	maxWriteAttempts = 50
	// DefaultLinger is how long the first claim of a quiet revision waits for more
	// claims to share its write. Claims arriving while a write is in flight always
	// share the next one.
	DefaultLinger = 2 * time.Millisecond
)

// ErrRecordFull is returned by Claim when a revision has more reservations in flight
// than its record can hold.
var ErrRecordFull = errors.New("too many seat reservations in flight for this revision")

// SeatLedger is the Ledger of every webhook replica: exact with any number of them.
//
// Seats held by placed pods come from the pod informer. Reservations for pods admitted
// but not yet seen are kept in the API server, one record per revision (a
// coordination.k8s.io Lease in the webhook's namespace, named after the revision),
// written with optimistic concurrency. Claims are group-committed: those arriving
// while a write of their revision is in flight (or within a short linger) share the
// next single Update; on a Conflict the record is read again and the whole batch
// recomputed. A claim's seat is final once its write succeeded.
//
// A reservation counts until this replica sees a pod carrying its id (the
// custom-kube-scheduler-webhook.io/reservation annotation; the pod then holds the seat
// until it goes, so a deleted pod's seat is free at once), or until it expires. It is
// never removed from the record because its pod was seen, since another replica may
// not see that pod yet; expired ones are pruned by every write, and a record idle past
// twice the TTL is deleted.
type SeatLedger struct {
	client    kubernetes.Interface
	namespace string
	ttl       time.Duration
	linger    time.Duration
	clock     clock.Clock
	log       logrus.FieldLogger
	factory   informers.SharedInformerFactory
	records   toolscache.SharedIndexInformer

	// ctx bounds background writes; set by Start.
	ctx context.Context

	mu   sync.Mutex
	revs map[Revision]*revState
}

// LedgerOptions tunes a SeatLedger; zero values take the defaults.
type LedgerOptions struct {
	// Linger is how long a write waits for more claims (DefaultLinger).
	Linger time.Duration
	// Clock decides expiry (the real clock).
	Clock clock.Clock
}

// NewSeatLedger returns a ledger keeping its records in namespace, whose reservations
// last ttl: long enough for the API server to persist an admitted pod and for the pod
// informer to show it. Feed it placed pods (PodVisible, PodGone), Start it and wait
// for HasSynced before the first Claim.
func NewSeatLedger(client kubernetes.Interface, namespace string, ttl time.Duration, log logrus.FieldLogger, opts LedgerOptions) (*SeatLedger, error) {
	l := &SeatLedger{
		client: client, namespace: namespace, ttl: ttl, linger: opts.Linger, clock: opts.Clock, log: log,
		ctx:  context.Background(),
		revs: map[Revision]*revState{},
		factory: informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.LabelSelector = labels.Set{strategy.LabelSeatRecord: recordKindSeats}.String()
			})),
	}
	if l.linger <= 0 {
		l.linger = DefaultLinger
	}
	if l.clock == nil {
		l.clock = clock.RealClock{}
	}
	l.records = l.factory.Coordination().V1().Leases().Informer()
	_, err := l.records.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { l.recordSeen(obj) },
		UpdateFunc: func(_, obj any) { l.recordSeen(obj) },
		DeleteFunc: l.recordGone,
	})
	if err != nil {
		return nil, fmt.Errorf("watch seat records: %w", err)
	}
	return l, nil
}

// Start runs the record informer and the sweep of idle records until ctx ends.
func (l *SeatLedger) Start(ctx context.Context) {
	l.mu.Lock()
	l.ctx = ctx
	l.mu.Unlock()
	l.factory.Start(ctx.Done())
	go func() {
		ticker := time.NewTicker(l.ttl)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
				l.Sweep(ctx)
			}
		}
	}()
}

// HasSynced reports whether the record informer has listed the namespace.
func (l *SeatLedger) HasSynced() bool { return l.records.HasSynced() }

// Claim implements Ledger.
func (l *SeatLedger) Claim(ctx context.Context, rev Revision, admission types.UID) (int, error) {
	hash := idHash(admission)
	l.mu.Lock()
	s := l.state(rev)
	if e := s.view[hash]; e != nil && l.clock.Now().Before(e.expires) {
		l.mu.Unlock()
		return e.seat, nil // the API server retried this admission
	}
	r := &request{hash: hash, done: make(chan struct{})}
	l.enqueue(s, r)
	l.mu.Unlock()
	select {
	case <-r.done:
		return r.seat, r.err
	case <-ctx.Done():
		return 0, fmt.Errorf("waiting for the seat record: %w", ctx.Err())
	}
}

// Peek implements Ledger.
func (l *SeatLedger) Peek(_ context.Context, rev Revision) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.revs[rev]
	if s == nil {
		return 1, nil
	}
	return s.lowest(l.clock.Now()), nil
}

// Release implements Ledger: the reservation is removed by the revision's next write
// (in the background; until then, and on other replicas until they see that write, the
// seat stays reserved).
func (l *SeatLedger) Release(_ context.Context, rev Revision, admission types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.revs[rev]
	if s == nil {
		return
	}
	hash := idHash(admission)
	if _, ok := s.view[hash]; ok {
		l.enqueue(s, &request{hash: hash, release: true, done: make(chan struct{})})
	}
}

// Reservations returns how many reservations this replica counts as taken (live, not
// yet seen on a pod), tentative ones included.
func (l *SeatLedger) Reservations() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	n := 0
	for _, s := range l.revs {
		s.expire(now)
		n += len(s.tentative)
		for _, e := range s.view {
			if e.counted {
				n++
			}
		}
	}
	return n
}
