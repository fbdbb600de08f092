package ledger

// Ownership: the replica holding a revision's record answers its claims. Taking,
// renewing and releasing the record, and sweeping idle ones.

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// liveHolder returns the revision's owner by the newest record known and its peer URL:
// "" when nobody owns it (no record, released, lapsed, or its holder gone for half the
// configured ownership). This replica's own name comes back even when lapsed, and for
// a record handed to it (succeed): the record is its to renew. A revision this replica
// handed over (transfer) is its successor's until a newer record shows.
func (l *Ledger) liveHolder(s *revState, now time.Time) (holder, peer string) {
	h := holderOf(s.record)
	switch {
	case s.successor != "":
		return s.successor, s.successorPeer
	case h == "" || h == l.identity:
		return h, ""
	case h == s.handedBy:
		return l.identity, ""
	case !now.Before(s.observed.Add(l.recordDuration(s.record))):
		return "", ""
	case s.goneHolder == h && !now.Before(s.goneSince.Add(l.duration/2)):
		// The configured duration, not the record's (up to a minute): half of that
		// would pass the admission deadline; a seat handed out twice is the loop's.
		return "", ""
	}
	return h, s.record.Annotations[strategy.AnnotationPeer]
}

// startWrite starts a write of the revision's record naming holder (at peer), or
// returns the write in flight; l.mu is held.
func (l *Ledger) startWrite(s *revState, holder, peer string) *ownershipWrite {
	if s.writing == nil {
		s.writing = &ownershipWrite{done: make(chan struct{})}
		go l.write(l.ctx, s, s.writing, holder, peer)
	}
	return s.writing
}

// acquire starts a write taking (or renewing) the revision's record for this replica,
// or joins the one in flight; l.mu is held.
func (l *Ledger) acquire(s *revState) *ownershipWrite {
	return l.startWrite(s, l.identity, l.cfg.PeerAddress)
}

// renewIfDue renews the owner's record in the background a quarter of the term after
// the last renewal; only claims renew, an idle record is released (releaseIdle). After
// the hand-over nothing renews: a revision taken back is taken again once its ownership
// ends.
func (l *Ledger) renewIfDue(s *revState, now time.Time) {
	if s.writing == nil && l.handedOver.IsZero() && now.Sub(s.renewedAt) >= max(s.term, l.duration)/4 {
		l.acquire(s)
	}
}

// recordDuration is how long a record's holder owns its revision after a write: its
// Lease duration, never less than this replica's.
func (l *Ledger) recordDuration(r *coordinationv1.Lease) time.Duration {
	d := l.duration
	if r != nil && r.Spec.LeaseDurationSeconds != nil {
		d = max(d, time.Duration(*r.Spec.LeaseDurationSeconds)*time.Second)
	}
	return d
}

// termFor is the ownership duration this replica writes: the configured one, or four
// times its slowest recent write (up to maxOwnership), so a slow write still lands with
// ownership left to answer in; before any write came back, twice writeTimeout. l.mu is
// held.
func (l *Ledger) termFor() time.Duration {
	d := 2 * writeTimeout
	if l.latencyKnown {
		d = (4 * l.writeLatency).Truncate(time.Second) + time.Second
	}
	return min(max(l.duration, d), max(l.duration, maxOwnership))
}

// write writes the revision's record naming holder (at peer; "": released), listing
// this replica's live reservations, and finishes w, this replica's write of it in
// flight. Naming itself, it takes or renews the revision: once the write lands it
// answers for half the term from the write's start, so one taking over after the whole
// term starts at least half of it after this one's last answer. Naming none (a
// release), it writes only a record it holds and does not own.
func (l *Ledger) write(ctx context.Context, s *revState, w *ownershipWrite, holder, peer string) {
	l.mu.Lock()
	start := l.clock.Now()
	own := holder == l.identity
	// The record may have shown up since the claim decided, held by a live replica.
	live, _ := l.liveHolder(s, start)
	if (own && live != "" && live != l.identity) || (!own && (holderOf(s.record) != l.identity || l.owns(s, start))) {
		l.mu.Unlock()
		l.finishWrite(s, w, nil)
		return
	}
	prev := s.record
	term := l.termFor()
	// Taking over: hold the listed reservations (undone if the write fails).
	var inherited []uint64
	if own && prev != nil && holderOf(prev) != l.identity {
		inherited = l.takeOver(s, prev, s.observed, start)
	}
	// Decided now: once the write lands, the informer may have cleared goneHolder.
	from := takenFrom(s, holderOf(prev), prev != nil)
	record := l.recordFor(s, start, term, holder, peer)
	l.mu.Unlock()

	written, err := l.putRecord(ctx, record, prev == nil)
	l.mu.Lock()
	// The slowest recent write: a slower one at once, a faster one halves the gap.
	took := l.clock.Since(start)
	l.writeLatency, l.latencyKnown = max(took, (l.writeLatency+took)/2), true
	switch {
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err):
		// Another replica wrote first, or the sweep deleted it: read it again.
		l.dropInherited(s, inherited)
		l.mu.Unlock()
		l.finishWrite(s, w, l.refresh(ctx, s.rev))
		return
	case err != nil:
		l.dropInherited(s, inherited)
		err = fmt.Errorf("write the seat record of revision %s: %w", s.rev.UID, err)
	case own:
		if holderOf(prev) != l.identity && from != "" {
			l.metrics.ownership.WithLabelValues(from).Inc()
		}
		l.apply(s, written)
		s.renewedAt, s.term = start, term
		s.ownedUntil = start.Add(term / 2)
	default:
		if !l.handedOver.IsZero() {
			l.metrics.handovers.Inc()
		}
		l.apply(s, written)
	}
	l.mu.Unlock()
	l.finishWrite(s, w, err)
}

// putRecord creates or updates a record within writeTimeout.
func (l *Ledger) putRecord(ctx context.Context, record *coordinationv1.Lease, create bool) (*coordinationv1.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	leases := l.client.CoordinationV1().Leases(l.namespace)
	if create {
		return leases.Create(ctx, record, metav1.CreateOptions{})
	}
	return leases.Update(ctx, record, metav1.UpdateOptions{})
}

func (l *Ledger) finishWrite(s *revState, w *ownershipWrite, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w.err = err
	if s.writing == w {
		s.writing = nil
	}
	close(w.done)
}

// takeOver holds the live reservations the previous holder's record, observed then,
// lists whose pods this replica does not see, and returns them. Seats a crashed holder
// answered after its last write are not listed: a seat handed out twice is the loop's
// to move.
func (l *Ledger) takeOver(s *revState, prev *coordinationv1.Lease, observed, now time.Time) []uint64 {
	seen := make(map[uint64]bool, len(s.pods))
	for _, p := range s.pods {
		seen[p.hash] = true
	}
	var added []uint64
	for h, e := range observedReservations(prev, observed) {
		if now.Before(e.expires) && s.reserved[h] == nil && !seen[h] {
			e.claims = 1
			l.hold(s, h, e)
			added = append(added, h)
		}
	}
	return added
}

// dropInherited undoes takeOver's holds when the write taking the record failed.
func (l *Ledger) dropInherited(s *revState, added []uint64) {
	for _, h := range added {
		if e := s.reserved[h]; e != nil {
			s.remove(h, e)
		}
	}
}

// recordFor is the revision's next record naming holder (at peer; "": released) for
// term, listing this replica's live reservations.
func (l *Ledger) recordFor(s *revState, now time.Time, term time.Duration, holder, peer string) *coordinationv1.Lease {
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
	l.owner.Apply(&record.ObjectMeta)
	s.expire(now)
	record.Annotations[strategy.AnnotationReservations] = encodeReservations(s.reserved)
	record.Annotations[strategy.AnnotationPeer] = peer
	record.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
	record.Spec.LeaseDurationSeconds = ptr.To(int32((term + time.Second - 1) / time.Second))
	if holder != "" && holder != holderOf(s.record) {
		record.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(now))
		record.Spec.LeaseTransitions = ptr.To(ptr.Deref(record.Spec.LeaseTransitions, 0) + 1)
	}
	record.Spec.HolderIdentity = ptr.To(holder)
	return record
}

func holderOf(record *coordinationv1.Lease) string {
	if record == nil {
		return ""
	}
	return ptr.Deref(record.Spec.HolderIdentity, "")
}

// refresh reads the revision's record, for a view newer than the informer's.
func (l *Ledger) refresh(ctx context.Context, rev clusterview.Revision) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	fresh, err := l.client.CoordinationV1().Leases(l.namespace).Get(ctx, recordName(rev.UID), metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("read the seat record of revision %s: %w", rev.UID, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.state(rev); apierrors.IsNotFound(err) {
		l.apply(s, nil)
	} else {
		l.applyNewer(s, fresh)
	}
	return nil
}

// Handover begins the hand-over: call it when the drain begins, while this replica
// still answers, and again, final, as its server stops taking connections. From the
// first call on nothing renews: this replica answers, from memory, the revisions it
// owns until their ownership ends, and hands each to the first peer that forwards it a
// claim (transfer), with no write. From then on this replica forwards its claims
// (leavesToSuccessor) and releases the records whose ownership ended, listing their
// live reservations, so that a peer takes them at once (releaseIdle). The final call
// stops answering as owner and releases what nobody took; after it this replica takes
// no revision back, as no peer could reach it as owner.
func (l *Ledger) Handover(ctx context.Context, final bool) {
	l.mu.Lock()
	if l.handedOver.IsZero() {
		l.handedOver = l.clock.Now()
	}
	l.final = l.final || final
	var writes []*ownershipWrite
	for _, s := range l.revs {
		if s.writing != nil {
			writes = append(writes, s.writing)
		}
		if final {
			s.ownedUntil = time.Time{}
		}
	}
	l.mu.Unlock()
	for _, w := range writes {
		<-w.done
	}
	if final {
		l.releaseIdle(ctx)
	}
}

// releaseIdle releases the records this replica holds but does not own any more and
// did not hand over, listing their live reservations, so the next owner takes the
// revision at once knowing every seat answered.
func (l *Ledger) releaseIdle(ctx context.Context) {
	l.mu.Lock()
	var releases []*ownershipWrite
	now := l.clock.Now()
	for _, s := range l.revs {
		if s.writing == nil && s.successor == "" && holderOf(s.record) == l.identity && !l.owns(s, now) {
			releases = append(releases, l.startWrite(s, "", ""))
		}
	}
	l.mu.Unlock()
	for _, w := range releases {
		select {
		case <-w.done:
			if w.err != nil {
				l.log.WithError(w.err).Info("cannot release a seat record; it lapses")
			}
		case <-ctx.Done():
			return
		}
	}
}

// transfer hands a revision this stopping replica owns to the peer caller (at
// callerPeer) whose claim asks for it, with no write: it stops answering as owner and
// returns the record listing every reservation it answered, and how long the caller
// may answer as owner, from its forward's start, while its own write lands. That is
// the rest of this replica's ownership, which no peer takes over (it waits a whole
// term from this replica's last write), capped at a quarter of the configured
// ownership: a peer that finds this replica gone waits half of it, so the caller's
// last answers before its write lands are as old then as a dead owner's are. nil:
// nothing to hand over (not stopping, not owning, a write in flight, or a caller of
// an older release).
func (l *Ledger) transfer(rev clusterview.Revision, caller, callerPeer string) (*coordinationv1.Lease, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, now := l.revs[rev], l.clock.Now()
	if caller == "" || l.handedOver.IsZero() || s == nil || s.record == nil || s.writing != nil || !l.owns(s, now) {
		return nil, 0
	}
	s.expire(now)
	record := s.record.DeepCopy()
	record.Annotations[strategy.AnnotationReservations] = encodeReservations(s.reserved)
	record.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
	remaining := min(s.ownedUntil.Sub(now), l.duration/4)
	s.successor, s.successorPeer, s.ownedUntil = caller, callerPeer, time.Time{}
	l.metrics.handovers.Inc()
	return record, remaining
}

// observedReservations reads a record's reservations with expiries on this replica's
// clock: each lasts, from when it was observed, as long as it had left at the record's
// RenewTime, so clocks of different nodes are never compared.
func observedReservations(record *coordinationv1.Lease, observed time.Time) map[uint64]*entry {
	view := decodeReservations(record.Annotations[strategy.AnnotationReservations])
	if record.Spec.RenewTime != nil {
		for _, e := range view {
			e.expires = observed.Add(e.expires.Sub(record.Spec.RenewTime.Time))
		}
	}
	return view
}

// sweep deletes the records seen unrenewed for twice the TTL whose reservations all
// expired, conditioned on the version seen.
func (l *Ledger) sweep(ctx context.Context) {
	now := l.clock.Now()
	var idle []*coordinationv1.Lease
	l.mu.Lock()
	for _, s := range l.revs {
		record := s.record
		if record == nil || s.writing != nil || now.Before(s.observed.Add(2*l.cfg.ReservationTTL)) {
			continue
		}
		live := false
		for _, e := range observedReservations(record, s.observed) {
			live = live || now.Before(e.expires)
		}
		if !live {
			idle = append(idle, record)
		}
	}
	l.mu.Unlock()
	for _, record := range idle {
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
		l.forget(s)
	}
}
