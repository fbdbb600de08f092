package ledger

// The ledger's view follows the informers: seat records and placed pods.

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// apply makes record (newer than the one known, nil: gone) the revision's record. A new
// holder or renewal restarts this replica's clock on it; another holder ends this
// replica's ownership; it ends a hand-over in memory either way (transfer, succeed). A
// record another replica wrote naming this one makes it hold the reservations listed,
// as taking the revision over does.
func (l *Ledger) apply(s *revState, record *coordinationv1.Lease) {
	s.successor, s.successorPeer, s.handedBy = "", "", ""
	handed := record != nil && holderOf(record) == l.identity && holderOf(s.record) != l.identity
	if record == nil || s.record == nil || holderOf(record) != holderOf(s.record) || !record.Spec.RenewTime.Equal(s.record.Spec.RenewTime) {
		s.observed = l.clock.Now()
		s.goneHolder = ""
	}
	if holderOf(record) != l.identity {
		s.ownedUntil = time.Time{}
	}
	s.record = record
	s.rv = 0
	if record != nil {
		s.rv = resourceVersion(record)
	}
	if handed {
		l.takeOver(s, record, s.observed, s.observed)
	}
}

// seatRecord returns an informer event's seat record (maybe in a tombstone) and revision.
func seatRecord(obj any) (*coordinationv1.Lease, clusterview.Revision, bool) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	record, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return nil, clusterview.Revision{}, false
	}
	rev, ok := recordRevision(record)
	return record, rev, ok
}

// recordSeen is the record informer's add/update handler.
func (l *Ledger) recordSeen(obj any) {
	record, rev, ok := seatRecord(obj)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.applyNewer(l.state(rev), record)
}

// applyNewer applies record where it is newer than the one known: not this replica's
// own write, already applied, nor an older version.
func (l *Ledger) applyNewer(s *revState, record *coordinationv1.Lease) {
	if s.record == nil || resourceVersion(record) > s.rv {
		l.apply(s, record)
	}
}

// recordGone is the record informer's delete handler.
func (l *Ledger) recordGone(obj any) {
	record, rev, ok := seatRecord(obj)
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

// placedPod returns a placed pod's revision, seat and reservation hash (0: none).
func placedPod(pod *corev1.Pod) (rev clusterview.Revision, seat int, hash uint64, ok bool) {
	if rev, seat, ok = clusterview.PlacedSeat(pod); !ok {
		return rev, 0, 0, false
	}
	if id := pod.Annotations[strategy.AnnotationReservation]; id != "" {
		hash = idHash(types.UID(id))
	}
	return rev, seat, hash, true
}

// PodVisible is called for every live placed pod the pod informer shows.
func (l *Ledger) PodVisible(pod *corev1.Pod) {
	l.podEvent(pod, func(s *revState, p podSeat) {
		if old, held := s.pods[pod.UID]; held {
			if old.seat == p.seat {
				return
			}
			s.seats.untake(old.seat)
		}
		s.pods[pod.UID] = p
		s.seats.take(p.seat)
	})
}

// PodGone is called when a placed pod stops holding its seat (terminating, finished,
// deleted): the seat is free at once.
func (l *Ledger) PodGone(pod *corev1.Pod) {
	l.podEvent(pod, func(s *revState, _ podSeat) {
		if old, held := s.pods[pod.UID]; held {
			delete(s.pods, pod.UID)
			s.seats.untake(old.seat)
		}
		l.forget(s)
	})
}

// podEvent applies a placed pod's event under the lock, fulfilling its reservation first.
func (l *Ledger) podEvent(pod *corev1.Pod, apply func(s *revState, p podSeat)) {
	rev, seat, hash, ok := placedPod(pod)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.state(rev)
	// The pod holds the seat from now on, not its reservation.
	if e := s.reserved[hash]; hash != 0 && e != nil && e.counted {
		s.uncount(e)
	}
	apply(s, podSeat{seat: seat, hash: hash})
}
