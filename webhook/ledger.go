package webhook

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

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

// revState is what one replica knows of a revision's seats. taken counts, per seat,
// the visible pods holding it plus the live reservations on it; the lowest free seat
// is the top of free (seats freed below low) or else the first untaken seat from low,
// so a claim costs O(log N) amortized, never a copy of the held seats.
type revState struct {
	rev Revision

	// The newest version of the record this replica knows (nil: none exists).
	record *coordinationv1.Lease
	rv     uint64
	// view holds the record's reservations by id hash.
	view map[uint64]*entry
	// tentative holds the seats of the batch being written, by id hash.
	tentative map[uint64]int
	expiries  expiryHeap
	// fulfilled holds the reservation ids whose pod this replica has seen; the state
	// is kept until the last of them is surely out of every record (lastFulfil).
	fulfilled  *cache.Expiring
	lastFulfil time.Time

	pods map[types.UID]int // visible pod -> the seat it holds

	taken  map[int]int
	free   intHeap
	inFree map[int]bool
	low    int

	queue   []*request
	writing bool
}

type entry struct {
	seat    int
	expires time.Time
	counted bool
}

type request struct {
	hash    uint64
	release bool
	seat    int
	err     error
	done    chan struct{}
}

// state returns the revision's state, creating it.
func (l *SeatLedger) state(rev Revision) *revState {
	s := l.revs[rev]
	if s == nil {
		s = &revState{
			rev: rev, view: map[uint64]*entry{}, tentative: map[uint64]int{},
			fulfilled: cache.NewExpiringWithClock(l.clock),
			pods:      map[types.UID]int{}, taken: map[int]int{}, inFree: map[int]bool{}, low: 1,
		}
		l.revs[rev] = s
	}
	return s
}

// forget drops a revision's state once it holds nothing.
func (l *SeatLedger) forget(s *revState) {
	if l.clock.Now().After(s.lastFulfil.Add(2*l.ttl)) && s.record == nil && len(s.view) == 0 && len(s.tentative) == 0 && len(s.pods) == 0 && len(s.queue) == 0 && !s.writing {
		delete(l.revs, s.rev)
	}
}

func (s *revState) take(seat int) { s.taken[seat]++ }

func (s *revState) untake(seat int) {
	if s.taken[seat]--; s.taken[seat] > 0 {
		return
	}
	delete(s.taken, seat)
	if seat < s.low && !s.inFree[seat] {
		s.free.push(seat)
		s.inFree[seat] = true
	}
}

// lowest returns the lowest free seat. Every free seat below low is in free (stale
// entries, taken again since, are dropped on the way).
func (s *revState) lowest(now time.Time) int {
	s.expire(now)
	for len(s.free) > 0 {
		top := s.free[0]
		if s.taken[top] == 0 {
			return top
		}
		s.free.pop()
		delete(s.inFree, top)
	}
	for s.taken[s.low] > 0 {
		s.low++
	}
	return s.low
}

// expire stops counting the reservations that expired by now.
func (s *revState) expire(now time.Time) {
	for len(s.expiries) > 0 && !s.expiries[0].at.After(now) {
		x := s.expiries.pop()
		if e := s.view[x.hash]; e != nil && e.counted && !e.expires.After(now) {
			e.counted = false
			s.untake(e.seat)
		}
	}
}

// fulfil records that the pod of reservation hash is visible: the pod, not the
// reservation, holds the seat from now on.
func (l *SeatLedger) fulfil(s *revState, hash uint64) {
	s.fulfilled.Set(hash, struct{}{}, 2*l.ttl)
	s.lastFulfil = l.clock.Now()
	if e := s.view[hash]; e != nil && e.counted {
		e.counted = false
		s.untake(e.seat)
	}
}

func (s *revState) isFulfilled(hash uint64) bool {
	_, ok := s.fulfilled.Get(hash)
	return ok
}

// apply makes record (a version newer than the one known) the view: reservations gone
// from it stop counting, new ones count while live. A new one that is the echo of this
// replica's own in-flight write takes over its tentative seat.
func (l *SeatLedger) apply(s *revState, record *coordinationv1.Lease) {
	now := l.clock.Now()
	next := map[uint64]*entry{}
	if record != nil {
		next = decodeReservations(record.Annotations[strategy.AnnotationReservations])
	}
	for h, e := range s.view {
		if _, ok := next[h]; !ok {
			if e.counted {
				s.untake(e.seat)
			}
			delete(s.view, h)
		}
	}
	for h, e := range next {
		if _, ok := s.view[h]; ok {
			continue
		}
		if seat, ok := s.tentative[h]; ok {
			delete(s.tentative, h)
			s.untake(seat)
		}
		e.counted = now.Before(e.expires) && !s.isFulfilled(h)
		if e.counted {
			s.take(e.seat)
			s.expiries.push(expiry{at: e.expires, hash: h})
		}
		s.view[h] = e
	}
	s.record = record
	s.rv = 0
	if record != nil {
		s.rv = resourceVersion(record)
	}
}

// recordSeen is the record informer's add/update handler.
func (l *SeatLedger) recordSeen(obj any) {
	record, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	rev, ok := recordRevision(record)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.state(rev)
	if s.record != nil && resourceVersion(record) <= s.rv {
		return // this replica's own write, already applied, or an older version
	}
	l.apply(s, record)
}

// recordGone is the record informer's delete handler.
func (l *SeatLedger) recordGone(obj any) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	record, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	rev, ok := recordRevision(record)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.revs[rev]
	if s == nil || s.record == nil || s.record.UID != record.UID || s.rv > resourceVersion(record) {
		return
	}
	l.apply(s, nil)
	l.forget(s)
}

// placedPod returns the seat revision a placed pod counts in, its seat and its
// reservation hash (0 when it carries none).
func placedPod(pod *corev1.Pod) (rev Revision, seat int, hash uint64, ok bool) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "ReplicaSet" {
		return Revision{}, 0, 0, false
	}
	seat, ok = strategy.SeatOf(pod)
	if !ok {
		return Revision{}, 0, 0, false
	}
	if id := pod.Annotations[strategy.AnnotationReservation]; id != "" {
		hash = idHash(types.UID(id))
	}
	// The pod's own namespace: a controller reference never crosses namespaces, so a
	// pod naming another namespace's ReplicaSet UID counts in a revision of its own.
	return Revision{Namespace: pod.Namespace, UID: ref.UID}, seat, hash, true
}

// PodVisible is called for every live placed pod the pod informer shows.
func (l *SeatLedger) PodVisible(pod *corev1.Pod) {
	rev, seat, hash, ok := placedPod(pod)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.state(rev)
	if hash != 0 {
		l.fulfil(s, hash)
	}
	if old, held := s.pods[pod.UID]; held {
		if old == seat {
			return
		}
		s.untake(old)
	}
	s.pods[pod.UID] = seat
	s.take(seat)
}

// PodGone is called when a placed pod stops holding its seat (terminating, finished,
// deleted): the seat is free at once.
func (l *SeatLedger) PodGone(pod *corev1.Pod) {
	rev, _, hash, ok := placedPod(pod)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.state(rev)
	if hash != 0 {
		l.fulfil(s, hash)
	}
	if seat, held := s.pods[pod.UID]; held {
		delete(s.pods, pod.UID)
		s.untake(seat)
	}
	l.forget(s)
}

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

// enqueue adds r to the revision's next batch and starts its writer if none runs.
func (l *SeatLedger) enqueue(s *revState, r *request) {
	s.queue = append(s.queue, r)
	if !s.writing {
		s.writing = true
		go l.write(l.ctx, s)
	}
}

// write commits the revision's queued claims and releases, one batch per record
// write, until the queue is empty. Claims queued while a write is in flight form the
// next batch.
func (l *SeatLedger) write(ctx context.Context, s *revState) {
	time.Sleep(l.linger)
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(s.queue) > 0 {
		batch := s.queue
		s.queue = nil
		var err error
		for attempt := 0; ; attempt++ {
			var done bool
			if done, err = l.commit(ctx, s, batch); done || err != nil {
				break
			}
			if attempt == maxWriteAttempts {
				err = fmt.Errorf("seat record of revision %s: still conflicting after %d attempts", s.rev.UID, attempt)
				break
			}
			// Claims that arrived meanwhile join the recomputed batch.
			batch = append(batch, s.queue...)
			s.queue = nil
		}
		for _, r := range batch {
			if err != nil && r.err == nil {
				r.err = err
			}
			close(r.done)
		}
	}
	s.writing = false
	l.forget(s)
}

// commit writes one batch against the newest known record, with l.mu held (released
// around the API call). It returns done when the write succeeded (the batch's seats are
// final), false after a conflict (the record was read again: recompute).
func (l *SeatLedger) commit(ctx context.Context, s *revState, batch []*request) (bool, error) {
	now := l.clock.Now()
	expires := now.Add(l.ttl)
	s.expire(now)
	// The new record: the live reservations, minus releases, plus the batch's claims.
	items := make(map[uint64]*entry, len(s.view)+len(batch))
	for h, e := range s.view {
		if now.Before(e.expires) {
			items[h] = e
		}
	}
	var placed []*request
	for _, r := range batch {
		if r.release {
			delete(items, r.hash)
			continue
		}
		if e, ok := items[r.hash]; ok { // committed already (a retried admission)
			r.seat = e.seat
			continue
		}
		if seat, ok := s.tentative[r.hash]; ok { // the same admission twice in this batch
			r.seat = seat
			continue
		}
		if len(items) >= maxReservations {
			r.err = ErrRecordFull
			continue
		}
		r.seat = s.lowest(now)
		s.take(r.seat)
		s.tentative[r.hash] = r.seat
		items[r.hash] = &entry{seat: r.seat, expires: expires}
		placed = append(placed, r)
	}
	unplace := func() {
		for _, r := range placed {
			if seat, ok := s.tentative[r.hash]; ok {
				delete(s.tentative, r.hash)
				s.untake(seat)
			}
		}
	}
	if len(placed) == 0 && len(items) == liveEntries(s.view, now) {
		return true, nil // nothing to write: retries and releases of unknown ids only
	}

	record := l.newRecord(s, items, now)
	leases := l.client.CoordinationV1().Leases(l.namespace)
	create := s.record == nil
	l.mu.Unlock()
	var (
		written *coordinationv1.Lease
		err     error
	)
	if create {
		written, err = leases.Create(ctx, record, metav1.CreateOptions{})
	} else {
		written, err = leases.Update(ctx, record, metav1.UpdateOptions{})
	}
	l.mu.Lock()
	if err == nil {
		if s.record == nil || resourceVersion(written) > s.rv {
			l.apply(s, written)
		}
		unplace() // left only if the echo carried another seat for them
		return true, nil
	}
	unplace()
	if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("write the seat record of revision %s: %w", s.rev.UID, err)
	}
	// Another replica wrote first (or the sweep deleted the record): read it again.
	l.mu.Unlock()
	fresh, err := leases.Get(ctx, recordName(s.rev.UID), metav1.GetOptions{})
	l.mu.Lock()
	switch {
	case apierrors.IsNotFound(err):
		l.apply(s, nil)
	case err != nil:
		return false, fmt.Errorf("read the seat record of revision %s: %w", s.rev.UID, err)
	case s.record == nil || resourceVersion(fresh) > s.rv:
		l.apply(s, fresh)
	}
	return false, nil
}

func liveEntries(view map[uint64]*entry, now time.Time) int {
	n := 0
	for _, e := range view {
		if now.Before(e.expires) {
			n++
		}
	}
	return n
}

// newRecord builds the next version of the revision's record holding items.
func (l *SeatLedger) newRecord(s *revState, items map[uint64]*entry, now time.Time) *coordinationv1.Lease {
	var record *coordinationv1.Lease
	if s.record != nil {
		record = s.record.DeepCopy()
	} else {
		record = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Name: recordName(s.rev.UID), Namespace: l.namespace,
			Labels: map[string]string{
				strategy.LabelSeatRecord: recordKindSeats, strategy.LabelRevision: string(s.rev.UID), strategy.LabelRevisionNamespace: s.rev.Namespace,
			},
		}}
	}
	if record.Annotations == nil {
		record.Annotations = map[string]string{}
	}
	record.Annotations[strategy.AnnotationReservations] = encodeReservations(items)
	renew := metav1.NewMicroTime(now)
	record.Spec.RenewTime = &renew
	record.Spec.LeaseDurationSeconds = ptr.To(int32((l.ttl + time.Second - 1) / time.Second))
	return record
}

// Sweep deletes the records idle for twice the TTL whose reservations all expired, so
// no record outlives its burst for long. Deletion is conditioned on the version seen:
// a record written meanwhile stays.
func (l *SeatLedger) Sweep(ctx context.Context) {
	now := l.clock.Now()
	for _, obj := range l.records.GetStore().List() {
		record, ok := obj.(*coordinationv1.Lease)
		if !ok || record.Spec.RenewTime == nil || now.Before(record.Spec.RenewTime.Add(2*l.ttl)) {
			continue
		}
		if liveEntries(decodeReservations(record.Annotations[strategy.AnnotationReservations]), now) > 0 {
			continue
		}
		err := l.client.CoordinationV1().Leases(l.namespace).Delete(ctx, record.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &record.UID, ResourceVersion: &record.ResourceVersion},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			l.log.WithError(err).WithField("record", record.Name).Debug("cannot delete an idle seat record")
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.revs {
		s.expire(now)
		l.forget(s)
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

func recordName(revision types.UID) string { return "seats-" + string(revision) }

func recordRevision(record *coordinationv1.Lease) (Revision, bool) {
	uid := record.Labels[strategy.LabelRevision]
	return Revision{Namespace: record.Labels[strategy.LabelRevisionNamespace], UID: types.UID(uid)}, uid != ""
}

// resourceVersion reads an object's resourceVersion as the number etcd makes it; an
// unreadable one reads as 0 (older than anything).
func resourceVersion(record *coordinationv1.Lease) uint64 {
	rv, _ := strconv.ParseUint(record.ResourceVersion, 10, 64)
	return rv
}

// idHash is the 64-bit FNV-1a hash of a reservation id, never 0.
func idHash(id types.UID) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	if v := h.Sum64(); v != 0 {
		return v
	}
	return 1
}

func encodeReservations(items map[uint64]*entry) string {
	buf := make([]byte, 0, len(items)*26)
	for h, e := range items {
		if len(buf) > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, int64(e.seat), 10)
		buf = append(buf, ':')
		buf = strconv.AppendUint(buf, h, 36)
		buf = append(buf, ':')
		buf = strconv.AppendInt(buf, e.expires.Unix(), 36)
	}
	return string(buf)
}

// decodeReservations parses a record's reservations, skipping malformed items.
func decodeReservations(s string) map[uint64]*entry {
	out := map[uint64]*entry{}
	for len(s) > 0 {
		item := s
		if i := strings.IndexByte(s, ','); i >= 0 {
			item, s = s[:i], s[i+1:]
		} else {
			s = ""
		}
		i := strings.IndexByte(item, ':')
		if i < 0 {
			continue
		}
		j := strings.IndexByte(item[i+1:], ':')
		if j < 0 {
			continue
		}
		seat, err1 := strconv.Atoi(item[:i])
		h, err2 := strconv.ParseUint(item[i+1:i+1+j], 36, 64)
		exp, err3 := strconv.ParseInt(item[i+2+j:], 36, 64)
		if err1 != nil || err2 != nil || err3 != nil || seat < 1 || h == 0 {
			continue
		}
		out[h] = &entry{seat: seat, expires: time.Unix(exp, 0)}
	}
	return out
}

// intHeap is a min-heap of seats.
type intHeap []int

func (h *intHeap) push(v int) {
	*h = append(*h, v)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p] <= a[i] {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *intHeap) pop() int {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	for i := 0; ; {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && a[c+1] < a[c] {
			c++
		}
		if a[i] <= a[c] {
			break
		}
		a[i], a[c] = a[c], a[i]
		i = c
	}
	*h = a
	return top
}

type expiry struct {
	at   time.Time
	hash uint64
}

// expiryHeap is a min-heap of reservation expiries.
type expiryHeap []expiry

func (h *expiryHeap) push(v expiry) {
	*h = append(*h, v)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if !a[i].at.Before(a[p].at) {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *expiryHeap) pop() expiry {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	for i := 0; ; {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && a[c+1].at.Before(a[c].at) {
			c++
		}
		if !a[c].at.Before(a[i].at) {
			break
		}
		a[i], a[c] = a[c], a[i]
		i = c
	}
	*h = a
	return top
}
