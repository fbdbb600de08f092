package webhook

// Group commit: the claims of a revision queued while a write is in flight share the
// next write of its record; idle records are swept.

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

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
