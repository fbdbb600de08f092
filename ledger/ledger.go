package ledger

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/ownership"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// Seat records.
const (
	// recordKindSeats is the value of strategy.LabelSeatRecord on seat records.
	recordKindSeats = "seats"
	// maxReservations keeps a record's annotations under the API server's 256 KiB.
	maxReservations = 9000
	// maxOwnership caps how far slow record writes lengthen the ownership duration.
	maxOwnership = time.Minute
	// writeTimeout bounds one record write or read.
	writeTimeout = 10 * time.Second
	// DefaultOwnership is the record's Lease duration: another replica takes an
	// unreleased revision over once it has seen the record unchanged for this long.
	DefaultOwnership = 5 * time.Second
)

// errHandedOver is a stopping peer's answer where it would have to take the revision.
var errHandedOver = errors.New("the seat ledger is stopping and takes no revision")

// errNotOwner is a peer's answer when it does not own the revision (any more).
var errNotOwner = errors.New("the peer does not own the revision")

// Ledger hands out the seats of workload revisions, exactly with any number of
// replicas and no API write per claim: each revision's owner (the holder of its seat
// record, a Lease) answers from memory, the others forward to it, a stopping owner hands
// over, and a dead one's revision is taken over from its record and the visible pods
// (docs/design/seat-ledger.md).
type Ledger struct {
	client    kubernetes.Interface
	namespace string
	cfg       Settings
	duration  time.Duration
	identity  string
	peers     *http.Client // nil: claims are never forwarded
	// peerReached is set once this process answered at its peer address.
	peerReached atomic.Bool
	// podsSeen reports whether the placed pods have all been fed (nil: not asked).
	podsSeen func() bool
	clock    clock.Clock
	owner    ownership.Owner
	log      logrus.FieldLogger
	records  toolscache.SharedIndexInformer
	metrics  *ledgerMetrics

	// ctx bounds background writes; set by Start.
	ctx context.Context

	mu   sync.Mutex
	revs map[clusterview.Revision]*revState
	// writeLatency is the slowest recent record write (termFor).
	writeLatency time.Duration
	latencyKnown bool
	// handedOver is when Handover first ran (zero: not yet), final whether its final
	// call did; see leavesToSuccessor.
	handedOver time.Time
	final      bool
}

// Settings are the seat ledger's knobs a user turns (RESERVATION_TTL, PEER_ADDRESS):
// serve reads them and hands them over.
type Settings struct {
	// ReservationTTL is how long a seat handed to an admitted pod stays reserved until
	// the pod informer shows the pod.
	ReservationTTL time.Duration
	// PeerAddress is where other replicas reach this one's PeerHandler (empty: nowhere).
	PeerAddress string
}

// Config is what a Ledger needs beside its client: the settings, and the rest wiring,
// whose zero values take the defaults.
type Config struct {
	Settings
	// Identity names this replica in records (hostname_pid).
	Identity string
	// PeerClient calls other replicas' PeerHandler (nil: claims are never forwarded).
	PeerClient *http.Client
	// Ownership is the record's Lease duration (DefaultOwnership).
	Ownership time.Duration
	// Clock decides expiry (the real clock).
	Clock clock.Clock
	// Owner owns the seat records (the webhook's Deployment; zero: no reference).
	Owner ownership.Owner
}

// New returns a ledger keeping its records in namespace. Feed it placed pods
// (PodVisible, PodGone), serve its PeerHandler, Start it and wait for HasSynced before
// Claim; Open does all but the serving.
func New(client kubernetes.Interface, namespace string, log logrus.FieldLogger, cfg Config) (*Ledger, error) {
	l := &Ledger{
		client: client, namespace: namespace, cfg: cfg.Settings, duration: cfg.Ownership, identity: cfg.Identity,
		peers: cfg.PeerClient, clock: cfg.Clock, log: log, owner: cfg.Owner,
		ctx:     context.Background(),
		revs:    map[clusterview.Revision]*revState{},
		metrics: newLedgerMetrics(),
		records: coordinationinformers.NewFilteredLeaseInformer(client, namespace, 0, toolscache.Indexers{}, func(o *metav1.ListOptions) {
			o.LabelSelector = labels.Set{strategy.LabelSeatRecord: recordKindSeats}.String()
		}),
	}
	if l.duration <= 0 {
		l.duration = DefaultOwnership
	}
	if l.clock == nil {
		l.clock = clock.RealClock{}
	}
	if l.identity == "" || l.cfg.ReservationTTL <= 0 {
		return nil, errors.New("seat ledger: an identity and a reservation TTL are required")
	}
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

// Start runs the record informer, the release of idle owned records and the sweep of
// idle records until ctx ends.
func (l *Ledger) Start(ctx context.Context) {
	l.mu.Lock()
	l.ctx = ctx
	l.mu.Unlock()
	go l.records.RunWithContext(ctx)
	go wait.UntilWithContext(ctx, l.sweep, l.cfg.ReservationTTL)
	go wait.UntilWithContext(ctx, func(ctx context.Context) { l.releaseIdle(ctx) }, l.duration/8)
}

// Open returns serve's ledger, fed the placed pods of caches and started on ctx. Its
// record writes (taking a revision, renewing it) are on the admission's critical path:
// they go through a client of restCfg's without a client-side limit, which would only
// queue claims past the webhook timeout; the API server's priority and fairness
// protects it instead.
func Open(ctx context.Context, restCfg *rest.Config, caches *clusterview.Caches, namespace string, log logrus.FieldLogger, cfg Config) (*Ledger, error) {
	unlimited := rest.CopyConfig(restCfg)
	unlimited.QPS = -1
	client, err := kubernetes.NewForConfig(unlimited)
	if err != nil {
		return nil, fmt.Errorf("create ledger client: %w", err)
	}
	l, err := New(client, namespace, log, cfg)
	if err != nil {
		return nil, err
	}
	if l.podsSeen, err = caches.OnPlacedPods(l.PodVisible, l.PodGone); err != nil {
		return nil, err
	}
	l.Start(ctx)
	return l, nil
}

// HasSynced reports whether the record informer has listed the namespace.
func (l *Ledger) HasSynced() bool { return l.records.HasSynced() }

// Unsynced names what the ledger has not read yet, for readiness: the placed pods it
// counts (when fed by Open) and its records.
func (l *Ledger) Unsynced() (names []string) {
	if l.podsSeen != nil && !l.podsSeen() {
		names = append(names, "placed pods (seat ledger)")
	}
	if !l.HasSynced() {
		names = append(names, "seat records")
	}
	return names
}

// Claim reserves a seat for the admission: as the revision's owner, from memory; else
// through the owner, or by taking the revision over when it has none.
func (l *Ledger) Claim(ctx context.Context, rev clusterview.Revision, admission types.UID) (int, error) {
	seat, forwarded, err := l.claim(ctx, rev, idHash(admission), true)
	l.metrics.countClaim(err, forwarded)
	return seat, err
}

// claim reserves a seat for the admission hash and tells whether a peer answered.
// Without forward (a peer's call) it answers errNotOwner where another replica owns the
// revision.
func (l *Ledger) claim(ctx context.Context, rev clusterview.Revision, hash uint64, forward bool) (seat int, forwarded bool, err error) {
	backoff := 5 * time.Millisecond
	for {
		l.mu.Lock()
		s := l.state(rev)
		now := l.clock.Now()
		if l.owns(s, now) {
			seat := l.reserve(s, hash, now)
			l.renewIfDue(s, now)
			l.mu.Unlock()
			return seat, false, nil
		}
		holder, peer := l.liveHolder(s, now)
		// Handed over (transfer): the successor answers, for this replica's claims and,
		// until its record shows, for the peers that still call here.
		through := s.successor != ""
		switch {
		case holder != "" && holder != l.identity:
			stopping := !l.handedOver.IsZero()
			l.mu.Unlock()
			if !forward && !through {
				return 0, false, errNotOwner
			}
			resp, err := l.forward(ctx, holder, peer, rev, hash, stopping)
			switch {
			case err == nil || errors.Is(err, errPeerRefused):
				return resp.Seat, true, err
			case resp.Handover != nil:
				l.succeed(s, resp.Handover, time.Duration(resp.Remaining)*time.Millisecond, now)
				continue
			case !through:
				if err := l.ownerMissed(ctx, s, holder, err); err != nil {
					return 0, false, err
				}
			}
		case l.leavesToSuccessor(now, forward):
			l.mu.Unlock()
			if !forward {
				return 0, false, errHandedOver
			}
		default:
			// Nobody owns it, or this replica's ownership lapsed: take it.
			write := l.acquire(s)
			l.mu.Unlock()
			if err := waitWrite(ctx, write, rev); err != nil {
				return 0, false, err
			}
			continue
		}
		select {
		case <-l.clock.After(backoff):
		case <-ctx.Done():
			return 0, forward, fmt.Errorf("waiting for the seat owner %q of revision %s: %w", holder, rev.UID, ctx.Err())
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// succeed takes the revision a stopping owner handed this replica in its answer
// (transfer), whose forward started at start: it holds the reservations the record
// lists, every one that owner answered, and answers as owner for the rest of that
// owner's ownership, while its own write of the record, started now, lands. Where a
// record newer than the handed one is known, somebody wrote since: nothing is taken.
func (l *Ledger) succeed(s *revState, handed *coordinationv1.Lease, remaining time.Duration, start time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.applyNewer(s, handed)
	if resourceVersion(handed) != s.rv || holderOf(handed) == "" {
		return
	}
	now := l.clock.Now()
	l.takeOver(s, handed, now, now)
	s.handedBy = holderOf(handed)
	if until := start.Add(remaining); until.After(s.ownedUntil) {
		if !l.owns(s, now) {
			l.metrics.ownership.WithLabelValues(ownedReleased).Inc()
		}
		s.ownedUntil = until
	}
	l.acquire(s)
}

// ownerMissed handles a forward to holder that got no seat: a stale record is read
// again; a gone owner is noted, and half the configured ownership later its revision is
// taken over (liveHolder; a newer record clears it, apply). The claim then retries.
func (l *Ledger) ownerMissed(ctx context.Context, s *revState, holder string, err error) error {
	switch {
	case errors.Is(err, errNotOwner):
		if err := l.refresh(ctx, s.rev); err != nil {
			return err
		}
	case errors.Is(err, errOwnerGone):
		l.mu.Lock()
		if s.goneHolder != holder {
			s.goneHolder, s.goneSince = holder, l.clock.Now()
		}
		l.mu.Unlock()
	}
	l.log.WithError(err).WithField("owner", holder).Debug("seat owner did not answer; retrying")
	return nil
}

// leavesToSuccessor reports whether this replica, having handed over, leaves a revision
// nobody owns to the others: always for a peer's claim, and for its own for half the
// ownership after Handover (then a last replica takes it back to answer through its
// drain) or after the final Handover (its server stops taking connections: a revision
// it took then would be one no peer can reach). l.mu is held.
func (l *Ledger) leavesToSuccessor(now time.Time, forward bool) bool {
	return !l.handedOver.IsZero() && (!forward || l.final || now.Before(l.handedOver.Add(l.duration/2)))
}

// waitWrite waits for a write of rev's record and returns its error.
func waitWrite(ctx context.Context, write *ownershipWrite, rev clusterview.Revision) error {
	select {
	case <-write.done:
		return write.err
	case <-ctx.Done():
		return fmt.Errorf("waiting for the seat record of revision %s: %w", rev.UID, ctx.Err())
	}
}

// state returns the revision's state, creating it.
func (l *Ledger) state(rev clusterview.Revision) *revState {
	s := l.revs[rev]
	if s == nil {
		s = &revState{
			rev: rev, reserved: map[uint64]*entry{},
			pods: map[types.UID]podSeat{}, seats: newSeatSet(),
			expiries: newMinHeap(func(a, b expiry) bool { return a.at.Before(b.at) }),
		}
		if l.metrics != nil {
			s.unfulfilled = l.metrics.unfulfilled
		}
		l.revs[rev] = s
	}
	return s
}

// owns reports whether this replica answers the revision's claims as its owner now.
func (l *Ledger) owns(s *revState, now time.Time) bool { return now.Before(s.ownedUntil) }

// Peek returns the lowest free seat in this replica's view (exact on the owner).
func (l *Ledger) Peek(_ context.Context, rev clusterview.Revision) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.revs[rev]
	if s == nil {
		return 1, nil
	}
	return s.lowest(l.clock.Now()), nil
}

// Release frees an admission's seat where this replica holds its reservation. A seat
// forwarded to another owner is not released: it expires (RESERVATION_TTL), or the API
// server's retry of the admission gets it back.
func (l *Ledger) Release(_ context.Context, rev clusterview.Revision, admission types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.revs[rev]; s != nil {
		l.unreserve(s, idHash(admission))
	}
}
