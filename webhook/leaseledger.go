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
	// Annotations of a fulfilled Lease: the pod holding its seat.
	annPodUID       = "custom-kube-scheduler-webhook.io/pod-uid"
	annPodName      = "custom-kube-scheduler-webhook.io/pod-name"
	annPodNamespace = "custom-kube-scheduler-webhook.io/pod-namespace"
	revisionIndex   = "revision"
	// maxClaimAttempts bounds the seats one claim tries when other replicas keep
	// winning the race; far more than a burst across a handful of replicas needs.
	maxClaimAttempts = 1000
)

// LeaseLedger is a Ledger shared by every webhook replica. A reservation is a
// coordination.k8s.io Lease in the webhook's own namespace, named after the revision and
// the seat: creating it is atomic, so two replicas can never hand out the same seat
// (the loser gets AlreadyExists and tries the next one). The way OpenKruise's
// WorkloadSpread keeps its subset status, the record lives in the API server.
//
// A Lease lives as long as its pod. Once a replica sees the pod it records the pod on
// the Lease ("fulfilled"); the Lease is deleted when that pod goes. It is not deleted
// when the pod appears: replicas watch Leases and pods on separate streams, so another
// replica may see the Lease vanish before it sees the pod, and take the seat again.
// A Lease whose pod never appears expires after the TTL. A seat blocked only by a
// fulfilled Lease whose pod this replica cannot see is checked with a live GET of the
// pod, so a deleted pod's replacement gets its seat even before the Lease is gone.
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
	// checked remembers, by Lease UID, fulfilled Leases whose pod a live GET found
	// (alive: true) or found gone and whose Lease was deleted (alive: false), so the
	// informers' lag does not cost a GET per claim.
	checked map[types.UID]check
}

type check struct {
	alive   bool
	expires time.Time
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
		pending: map[types.UID]map[int]time.Time{}, mine: map[types.UID]claim{}, checked: map[types.UID]check{},
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
		if lease, ok := obj.(*coordinationv1.Lease); ok && seatLabel(lease) > 0 {
			l.unmark(types.UID(lease.Labels[labelRevision]), seatLabel(lease))
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

// PodVisible is called when the pod cache shows a live placed pod: its Lease, if still
// unfulfilled, records the pod (in the background: this runs on an informer's event path).
func (l *LeaseLedger) PodVisible(ctx context.Context, pod *corev1.Pod) {
	lease := l.leaseOf(pod)
	if lease == nil || lease.Annotations[annPodUID] != "" {
		return
	}
	lease = lease.DeepCopy()
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[annPodUID], lease.Annotations[annPodName], lease.Annotations[annPodNamespace] = string(pod.UID), pod.Name, pod.Namespace
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := l.client.CoordinationV1().Leases(l.namespace).Update(ctx, lease, metav1.UpdateOptions{})
		if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			l.log.WithError(err).WithField("lease", lease.Name).Debug("cannot record the pod on its seat lease")
		}
	}()
}

// PodGone is called when a placed pod stops holding its seat: the Lease recording that
// very pod is deleted, so the seat is free for the replacement. A Lease of another pod
// (a replacement already admitted for the seat) is left alone.
func (l *LeaseLedger) PodGone(ctx context.Context, pod *corev1.Pod) {
	lease := l.leaseOf(pod)
	if lease == nil || lease.Annotations[annPodUID] != string(pod.UID) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l.deleteLease(ctx, lease)
	}()
}

// leaseOf returns the cached Lease of a placed pod's seat, if any.
func (l *LeaseLedger) leaseOf(pod *corev1.Pod) *coordinationv1.Lease {
	ref := metav1.GetControllerOf(pod)
	seat, ok := SeatOf(pod)
	if ref == nil || !ok {
		return nil
	}
	obj, exists, _ := l.leases.GetByKey(l.namespace + "/" + leaseName(ref.UID, seat))
	lease, _ := obj.(*coordinationv1.Lease)
	if !exists {
		return nil
	}
	return lease
}

// deleteLease deletes exactly this Lease (UID precondition), never a newer one of the
// same seat.
func (l *LeaseLedger) deleteLease(ctx context.Context, lease *coordinationv1.Lease) {
	err := l.client.CoordinationV1().Leases(l.namespace).Delete(ctx, lease.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &lease.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		l.log.WithError(err).WithField("lease", lease.Name).Debug("cannot delete a seat lease")
	}
}

// Claim implements Ledger.
func (l *LeaseLedger) Claim(ctx context.Context, revision, admission types.UID) (int, error) {
	if seat, ok := l.heldBy(revision, admission); ok {
		return seat, nil // the API server retried this admission
	}
	for range maxClaimAttempts {
		l.mu.Lock()
		taken, unseen := l.takenLocked(revision)
		seat := strategy.LowestFreeSeat(taken)
		var verify []*coordinationv1.Lease
		for _, lease := range unseen {
			if seatLabel(lease) < seat {
				verify = append(verify, lease)
			}
		}
		if len(verify) == 0 {
			l.markLocked(revision, seat)
		}
		l.mu.Unlock()
		if len(verify) > 0 {
			// A lower seat is blocked only by the Lease of a pod this replica cannot see:
			// ask the API server whether the pod is still there, then look again.
			for _, lease := range verify {
				if err := l.verify(ctx, lease); err != nil {
					return 0, err
				}
			}
			continue
		}

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
	taken, _ := l.takenLocked(revision)
	return strategy.LowestFreeSeat(taken), nil
}

// verify GETs the pod a fulfilled Lease records: if it is gone (or another pod, or no
// longer holding its seat) the Lease is deleted, else the Lease stands.
func (l *LeaseLedger) verify(ctx context.Context, lease *coordinationv1.Lease) error {
	pod, err := l.client.CoreV1().Pods(lease.Annotations[annPodNamespace]).Get(ctx, lease.Annotations[annPodName], metav1.GetOptions{})
	alive := err == nil && string(pod.UID) == lease.Annotations[annPodUID] && HoldsSeat(pod)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("check the pod of seat lease %s: %w", lease.Name, err)
	}
	if !alive {
		l.deleteLease(ctx, lease)
	}
	l.mu.Lock()
	l.checked[lease.UID] = check{alive: alive, expires: l.now().Add(l.ttl)}
	l.mu.Unlock()
	return nil
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
	lease, err := l.client.CoordinationV1().Leases(l.namespace).Get(ctx, leaseName(revision, seat), metav1.GetOptions{})
	if err != nil || ptr.Deref(lease.Spec.HolderIdentity, "") != string(admission) {
		return
	}
	l.deleteLease(ctx, lease)
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
	case lease.Annotations[annPodUID] != "" || !l.expired(lease) || l.held.Held(revision)[seat]:
		return false, nil // fulfilled, live, or its pod is visible
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
// or the pod shows up in a cache, or at expiry. unseen lists the fulfilled Leases whose
// pod the pod cache does not show (lag, or the pod is gone) and that no recent live
// check settled: they count as taken until verified.
func (l *LeaseLedger) takenLocked(revision types.UID) (taken map[int]bool, unseen []*coordinationv1.Lease) {
	taken = l.held.Held(revision)
	if taken == nil {
		taken = map[int]bool{}
	}
	held := make(map[int]bool, len(taken))
	for seat := range taken {
		held[seat] = true
	}
	now := l.now()
	visible := map[int]bool{}
	objs, _ := l.leases.ByIndex(revisionIndex, string(revision))
	for _, o := range objs {
		lease, ok := o.(*coordinationv1.Lease)
		seat := seatLabel(lease)
		if !ok || seat < 1 {
			continue
		}
		visible[seat] = true
		switch c, known := l.checked[lease.UID]; {
		case lease.Annotations[annPodUID] == "":
			if !l.expired(lease) {
				taken[seat] = true
			}
		case held[seat]:
		case known && now.Before(c.expires):
			if c.alive {
				taken[seat] = true
			}
		default:
			taken[seat] = true
			unseen = append(unseen, lease)
		}
	}
	for seat, expires := range l.pending[revision] {
		if visible[seat] || held[seat] || now.After(expires) {
			delete(l.pending[revision], seat)
			continue
		}
		taken[seat] = true
	}
	if len(l.pending[revision]) == 0 {
		delete(l.pending, revision)
	}
	return taken, unseen
}

func seatLabel(lease *coordinationv1.Lease) int {
	if lease == nil {
		return 0
	}
	seat, err := strconv.Atoi(lease.Labels[labelSeat])
	if err != nil {
		return 0
	}
	return seat
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

// sweep deletes unfulfilled Leases that expired a whole TTL ago (their pod was never
// created), and fulfilled ones whose pod a live GET finds gone (a deletion this replica
// missed, e.g. while no replica was running).
func (l *LeaseLedger) sweep(ctx context.Context) {
	now := l.now()
	l.mu.Lock()
	for uid, c := range l.mine {
		if now.After(c.expires) {
			delete(l.mine, uid)
		}
	}
	for uid, c := range l.checked {
		if now.After(c.expires) {
			delete(l.checked, uid)
		}
	}
	l.mu.Unlock()
	for _, o := range l.leases.List() {
		lease, ok := o.(*coordinationv1.Lease)
		if !ok || lease.Spec.RenewTime == nil || !now.After(lease.Spec.RenewTime.Add(2*l.ttl)) {
			continue
		}
		if lease.Annotations[annPodUID] == "" {
			l.deleteLease(ctx, lease)
			continue
		}
		if revision := types.UID(lease.Labels[labelRevision]); !l.held.Held(revision)[seatLabel(lease)] {
			if err := l.verify(ctx, lease); err != nil {
				l.log.WithError(err).WithField("lease", lease.Name).Debug("cannot check a seat lease's pod")
			}
		}
	}
}

func leaseName(revision types.UID, seat int) string {
	return fmt.Sprintf("seat-%s-%d", revision, seat)
}
