package webhook

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// Labels of seat Leases.
const (
	labelRevision = "custom-kube-scheduler-webhook.io/revision"
	labelSeat     = "custom-kube-scheduler-webhook.io/seat"
	revisionIndex = "revision"
	// maxClaimAttempts bounds the seats one claim tries when other replicas keep
	// winning the race; far more than a burst across a handful of replicas needs.
	maxClaimAttempts = 1000
)

// LeaseLedger is a Ledger shared by every webhook replica. A reservation is a
// coordination.k8s.io Lease in the webhook's own namespace, named after the revision and
// the seat: creating it is atomic, so two replicas can never hand out the same seat
// (the loser gets AlreadyExists and tries the next one). The way OpenKruise's
// WorkloadSpread keeps its subset status, the record lives in the API server and is
// short-lived: a Lease is deleted as soon as a pod carrying its seat is visible (the pod
// is then the record), and one whose pod never appears expires after the TTL.
type LeaseLedger struct {
	client    kubernetes.Interface
	namespace string
	held      HeldSeats
	ttl       time.Duration
	now       func() time.Time
	log       logrus.FieldLogger

	factory informers.SharedInformerFactory
	leases  cache.Indexer

	mu sync.Mutex
	// pending marks seats this replica created or found taken but whose Lease its
	// informer has not shown yet, so concurrent claims here do not collide needlessly.
	pending map[types.UID]map[int]time.Time
	// mine remembers this replica's own claims by admission UID until they expire, so a
	// Release or a retry right after a Claim does not depend on the informer's lag.
	mine map[types.UID]claim
}

type claim struct {
	revision types.UID
	seat     int
	expires  time.Time
}

// NewLeaseLedger returns a ledger keeping its Leases in namespace. Start it, then wait
// for HasSynced, before the first Claim.
func NewLeaseLedger(client kubernetes.Interface, namespace string, held HeldSeats, ttl time.Duration, log logrus.FieldLogger) (*LeaseLedger, error) {
	l := &LeaseLedger{
		client: client, namespace: namespace, held: held, ttl: ttl, now: time.Now, log: log,
		pending: map[types.UID]map[int]time.Time{}, mine: map[types.UID]claim{},
		factory: informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.LabelSelector = labels.Set{strategy.LabelManaged: "true"}.String()
			})),
	}
	inf := l.factory.Coordination().V1().Leases().Informer()
	if err := inf.AddIndexers(cache.Indexers{revisionIndex: func(obj any) ([]string, error) {
		if lease, ok := obj.(*coordinationv1.Lease); ok {
			return []string{lease.Labels[labelRevision]}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, fmt.Errorf("add lease revision index: %w", err)
	}
	l.leases = inf.GetIndexer()
	// Once the informer shows a Lease, the pending mark for its seat has done its job;
	// left in place it would block the seat after the Lease is deleted.
	seen := func(obj any) {
		lease, ok := obj.(*coordinationv1.Lease)
		if !ok {
			return
		}
		if seat, err := strconv.Atoi(lease.Labels[labelSeat]); err == nil {
			l.unmark(types.UID(lease.Labels[labelRevision]), seat)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, obj any) { seen(obj) }}); err != nil {
		return nil, fmt.Errorf("watch seat leases: %w", err)
	}
	return l, nil
}

// Start runs the Lease informer and a sweep of expired Leases until ctx ends.
func (l *LeaseLedger) Start(ctx context.Context) {
	l.factory.Start(ctx.Done())
	go func() {
		ticker := time.NewTicker(l.ttl)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
				l.sweep(ctx)
			}
		}
	}()
}

// HasSynced reports whether the Lease informer has listed the namespace.
func (l *LeaseLedger) HasSynced() bool {
	return l.factory.Coordination().V1().Leases().Informer().HasSynced()
}

// SeatVisible is called when the pod cache shows a pod holding seat of revision: its
// Lease has done its job and is deleted (in the background: this runs on an informer's
// event path), so that when the pod goes the seat is free at once.
func (l *LeaseLedger) SeatVisible(ctx context.Context, revision types.UID, seat int) {
	name := leaseName(revision, seat)
	if _, exists, _ := l.leases.GetByKey(l.namespace + "/" + name); !exists {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := l.client.CoordinationV1().Leases(l.namespace).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			l.log.WithError(err).WithField("lease", name).Debug("cannot delete a fulfilled seat lease; it will expire")
		}
	}()
}

// Claim implements Ledger.
func (l *LeaseLedger) Claim(ctx context.Context, revision, admission types.UID) (int, error) {
	if seat, ok := l.heldBy(revision, admission); ok {
		return seat, nil // the API server retried this admission
	}
	for range maxClaimAttempts {
		l.mu.Lock()
		seat := strategy.LowestFreeSeat(l.takenLocked(revision))
		l.markLocked(revision, seat)
		l.mu.Unlock()

		err := l.create(ctx, revision, seat, admission)
		if err == nil {
			l.remember(revision, seat, admission)
			return seat, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			l.unmark(revision, seat)
			return 0, fmt.Errorf("reserve seat %d: %w", seat, err)
		}
		// Another replica holds it, unless its Lease expired with no pod to show for it.
		if won, err := l.takeOverExpired(ctx, revision, seat, admission); err != nil {
			return 0, err
		} else if won {
			l.remember(revision, seat, admission)
			return seat, nil
		}
	}
	return 0, fmt.Errorf("no free seat found in %d attempts", maxClaimAttempts)
}

// Peek implements Ledger.
func (l *LeaseLedger) Peek(_ context.Context, revision types.UID) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strategy.LowestFreeSeat(l.takenLocked(revision)), nil
}

// Release implements Ledger: the admission's Lease is deleted if it still holds it.
func (l *LeaseLedger) Release(ctx context.Context, revision, admission types.UID) {
	seat, ok := l.heldBy(revision, admission)
	if !ok {
		return
	}
	l.mu.Lock()
	delete(l.mine, admission)
	delete(l.pending[revision], seat)
	l.mu.Unlock()
	name := leaseName(revision, seat)
	lease, err := l.client.CoordinationV1().Leases(l.namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil || ptr.Deref(lease.Spec.HolderIdentity, "") != string(admission) {
		return
	}
	err = l.client.CoordinationV1().Leases(l.namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &lease.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		l.log.WithError(err).WithField("lease", name).Debug("cannot release a seat lease; it will expire")
	}
}

func (l *LeaseLedger) create(ctx context.Context, revision types.UID, seat int, admission types.UID) error {
	now := metav1.NewMicroTime(l.now())
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: leaseName(revision, seat), Namespace: l.namespace,
			Labels: map[string]string{strategy.LabelManaged: "true", labelRevision: string(revision), labelSeat: strconv.Itoa(seat)},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(string(admission)),
			LeaseDurationSeconds: ptr.To(int32(l.ttl.Round(time.Second) / time.Second)),
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}
	_, err := l.client.CoordinationV1().Leases(l.namespace).Create(ctx, lease, metav1.CreateOptions{})
	return err
}

// takeOverExpired reads the Lease that beat us to seat: it may be ours (a retry), or
// expired with no pod holding the seat, in which case an update conditioned on its
// resourceVersion takes it over; any other replica's concurrent take-over wins instead.
func (l *LeaseLedger) takeOverExpired(ctx context.Context, revision types.UID, seat int, admission types.UID) (bool, error) {
	leases := l.client.CoordinationV1().Leases(l.namespace)
	lease, err := leases.Get(ctx, leaseName(revision, seat), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil // deleted meanwhile: the next attempt will see the seat free
	case err != nil:
		return false, fmt.Errorf("read seat lease %d: %w", seat, err)
	case ptr.Deref(lease.Spec.HolderIdentity, "") == string(admission):
		return true, nil
	case !l.expired(lease) || l.held.Held(revision)[seat]:
		return false, nil
	}
	now := metav1.NewMicroTime(l.now())
	lease.Spec.HolderIdentity, lease.Spec.AcquireTime, lease.Spec.RenewTime = ptr.To(string(admission)), &now, &now
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("take over expired seat lease %d: %w", seat, err)
	}
	return true, nil
}

func (l *LeaseLedger) remember(revision types.UID, seat int, admission types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mine[admission] = claim{revision: revision, seat: seat, expires: l.now().Add(l.ttl)}
}

// heldBy finds the seat of revision that admission holds: a claim this replica made,
// or a live Lease another replica created for it.
func (l *LeaseLedger) heldBy(revision, admission types.UID) (int, bool) {
	l.mu.Lock()
	c, ok := l.mine[admission]
	l.mu.Unlock()
	if ok && c.revision == revision && l.now().Before(c.expires) {
		return c.seat, true
	}
	objs, _ := l.leases.ByIndex(revisionIndex, string(revision))
	for _, o := range objs {
		lease, ok := o.(*coordinationv1.Lease)
		if ok && ptr.Deref(lease.Spec.HolderIdentity, "") == string(admission) && !l.expired(lease) {
			seat, err := strconv.Atoi(lease.Labels[labelSeat])
			return seat, err == nil
		}
	}
	return 0, false
}

// takenLocked is held ∪ live Leases ∪ pending marks. A pending mark ends once the Lease
// or the pod shows up in a cache, or at expiry.
func (l *LeaseLedger) takenLocked(revision types.UID) map[int]bool {
	taken := l.held.Held(revision)
	if taken == nil {
		taken = map[int]bool{}
	}
	visible := map[int]bool{}
	objs, _ := l.leases.ByIndex(revisionIndex, string(revision))
	for _, o := range objs {
		lease, ok := o.(*coordinationv1.Lease)
		if !ok {
			continue
		}
		if seat, err := strconv.Atoi(lease.Labels[labelSeat]); err == nil {
			visible[seat] = true
			if !l.expired(lease) {
				taken[seat] = true
			}
		}
	}
	now := l.now()
	for seat, expires := range l.pending[revision] {
		if visible[seat] || taken[seat] || now.After(expires) {
			delete(l.pending[revision], seat)
			continue
		}
		taken[seat] = true
	}
	if len(l.pending[revision]) == 0 {
		delete(l.pending, revision)
	}
	return taken
}

func (l *LeaseLedger) markLocked(revision types.UID, seat int) {
	if l.pending[revision] == nil {
		l.pending[revision] = map[int]time.Time{}
	}
	l.pending[revision][seat] = l.now().Add(l.ttl)
}

func (l *LeaseLedger) unmark(revision types.UID, seat int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pending[revision], seat)
	if len(l.pending[revision]) == 0 {
		delete(l.pending, revision)
	}
}

func (l *LeaseLedger) expired(lease *coordinationv1.Lease) bool {
	if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return true
	}
	return l.now().After(lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second))
}

// sweep deletes Leases that expired a whole TTL ago: their pod was never created, or
// their revision is gone.
func (l *LeaseLedger) sweep(ctx context.Context) {
	l.mu.Lock()
	for uid, c := range l.mine {
		if l.now().After(c.expires) {
			delete(l.mine, uid)
		}
	}
	l.mu.Unlock()
	for _, o := range l.leases.List() {
		lease, ok := o.(*coordinationv1.Lease)
		if !ok || lease.Spec.RenewTime == nil || !l.now().After(lease.Spec.RenewTime.Add(2*l.ttl)) {
			continue
		}
		err := l.client.CoordinationV1().Leases(l.namespace).Delete(ctx, lease.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &lease.ResourceVersion}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			l.log.WithError(err).WithField("lease", lease.Name).Debug("cannot sweep an expired seat lease")
		}
	}
}

func leaseName(revision types.UID, seat int) string {
	return fmt.Sprintf("seat-%s-%d", revision, seat)
}

// seatOfPod reads the revision and seat of a placed pod, for SeatVisible.
func seatOfPod(pod *corev1.Pod) (types.UID, int, bool) {
	ref := metav1.GetControllerOf(pod)
	seat, ok := SeatOf(pod)
	if ref == nil || !ok || !HoldsSeat(pod) {
		return "", 0, false
	}
	return ref.UID, seat, true
}
