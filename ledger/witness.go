package ledger

// Witnessed answers: the owner of a revision has another replica, its witness,
// acknowledge each seat before answering it, so that the witness knows every seat the
// owner handed out and takes the revision over the moment the owner is found gone,
// without waiting for the pods of the owner's last answers to become visible.
//
// The invariant: while the newest record names a witness W, every seat its holder
// answered since that record's write began, and is still within the TTL, was
// acknowledged by W first; the seats answered before are listed in the record. So W,
// taking the revision over from that record (a write conditioned on its version),
// holds the listed reservations and what it witnessed, and nothing else can be in
// flight. An owner that loses its witness answers nothing more until a record naming
// no witness (or the new one) has landed; a replica taking over from such a record
// falls back on the seat mark.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

const (
	// DefaultWitnessTimeout bounds one batch's acknowledgement: the claims in it wait
	// that long at most before the owner gives the witness up.
	DefaultWitnessTimeout = time.Second
	// DefaultWitnessWarmUp is how long a replica runs before it offers itself as a
	// witness: a starting process (its caches listing, its connections new) can be
	// slow to acknowledge, and an owner that gives its witness up waits for a record
	// write before answering again.
	DefaultWitnessWarmUp = 10 * time.Second
	// maxWitnessBatch bounds the answers one call carries (about 20 bytes each).
	maxWitnessBatch = 2000
	// maxWitnessCalls bounds the calls out to a revision's witness at once: on a busy
	// machine a call takes long, and answers queued behind one would wait for two.
	maxWitnessCalls = 4
)

// errNoWitness fails a batch whose witness was given up before it was sent.
var errNoWitness = errors.New("the revision's witness was given up")

// witnessBatch is the owner's answers waiting for one acknowledgement; err is set
// before done is closed.
type witnessBatch struct {
	answers []witnessedAnswer
	done    chan struct{}
	err     error
}

type witnessedAnswer struct {
	hash uint64
	seat int
}

// ownerWitness is the owner's side of a revision's witnessing. l.mu guards it.
type ownerWitness struct {
	// witness is the replica acknowledging this owner's answers now ("" for none), at
	// peer; recorded is the witness the last landed write of the record named.
	witness, peer string
	recorded      string
	// candidate is the last replica that forwarded a claim of the revision, at
	// candidatePeer: the next witness. givenUp is when the last one was given up: a
	// new one is taken only an ownership duration later, so a flapping peer costs
	// few record writes.
	candidate, candidatePeer string
	givenUp                  time.Time
	// next collects the answers for the next call; sending counts the goroutines
	// sending batches (at most maxWitnessCalls).
	next    *witnessBatch
	sending int
}

// witnessView is the witness's side: the answers acknowledged for owner, by id hash.
type witnessView struct {
	owner   string
	answers map[uint64]*entry
}

// of returns the answers known of owner, forgetting those of an earlier one. Expired
// ones are dropped by the sweep (forget).
func (v *witnessView) of(owner string) map[uint64]*entry {
	if v.owner != owner || v.answers == nil {
		v.owner, v.answers = owner, map[uint64]*entry{}
	}
	return v.answers
}

// witnessSettled reports whether the owner may answer claims now: the last landed record
// names no witness, or the one acknowledging its answers, and no write in flight names
// a witness given up since (its record would let that replica take over at once without
// the answers given meanwhile). l.mu is held.
func (s *revState) witnessSettled() bool {
	w := &s.witnessing
	if s.writing != nil && s.writing.witness != "" && s.writing.witness != w.witness {
		return false
	}
	return w.recorded == "" || w.recorded == w.witness
}

// reset forgets the witnessing of an earlier ownership: a record this replica takes
// over names no witness of its own until it picks one.
func (w *ownerWitness) reset() {
	w.witness, w.peer, w.recorded = "", "", ""
}

// offersWitness reports whether this replica has run for its warm-up: its forwarded
// claims name it, so that their owner may make it the witness.
func (l *Ledger) offersWitness() bool { return !l.clock.Now().Before(l.offersWitnessAt) }

// witnessCandidate notes that replica from, answering peers at peer, forwarded a
// claim of rev: it may become the revision's witness.
func (l *Ledger) witnessCandidate(rev clusterview.Revision, from, peer string) {
	if from == "" || peer == "" || from == l.identity {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	w := &l.state(rev).witnessing
	w.candidate, w.candidatePeer = from, peer
}

// adoptWitness makes the last forwarding replica the revision's witness, when it has
// none, and starts a write naming it. l.mu is held; s is owned.
func (l *Ledger) adoptWitness(s *revState, now time.Time) {
	w := &s.witnessing
	if w.witness != "" || w.candidate == "" || now.Before(w.givenUp.Add(l.duration)) {
		return
	}
	w.witness, w.peer = w.candidate, w.candidatePeer
	l.acquire(s)
}

// giveUpWitness stops witnessing by witness (a failed acknowledgement): claims wait for
// a record naming no witness before the next answer. l.mu is held.
func (l *Ledger) giveUpWitness(s *revState, witness string, now time.Time) {
	w := &s.witnessing
	if w.witness != witness {
		return
	}
	w.witness, w.peer, w.givenUp = "", "", now
	if w.candidate == witness {
		w.candidate, w.candidatePeer = "", ""
	}
	l.metrics.witness.WithLabelValues(witnessGivenUp).Inc()
}

// witnessAnswer queues the answer of seat to the admission hash for the witness and
// returns the batch to wait for. l.mu is held; s has a witness.
func (l *Ledger) witnessAnswer(s *revState, hash uint64, seat int) *witnessBatch {
	w := &s.witnessing
	if w.next == nil {
		w.next = &witnessBatch{done: make(chan struct{})}
		if w.sending < maxWitnessCalls {
			w.sending++
			go l.sendWitnessBatches(s)
		}
	}
	b := w.next
	b.answers = append(b.answers, witnessedAnswer{hash: hash, seat: seat})
	return b
}

// sendWitnessBatches sends the revision's queued answers to its witness, a batch at a
// time, until none is left: the answers queued while the calls are out go in the next
// one a sender takes.
func (l *Ledger) sendWitnessBatches(s *revState) {
	for {
		l.mu.Lock()
		w := &s.witnessing
		b := w.next
		w.next = nil
		if b == nil {
			w.sending--
			l.mu.Unlock()
			return
		}
		witness, peer := w.witness, w.peer
		l.mu.Unlock()
		err := errNoWitness
		if witness != "" {
			err = l.callWitness(witness, peer, s.rev, b.answers)
		}
		if err != nil {
			l.mu.Lock()
			l.giveUpWitness(s, witness, l.clock.Now())
			l.mu.Unlock()
			if witness != "" {
				l.log.WithError(err).WithField("witness", witness).Info("seat witness did not acknowledge; answering without one after the next record write")
			}
		} else {
			l.metrics.witness.WithLabelValues(witnessAcknowledged).Inc()
		}
		b.err = err
		close(b.done)
	}
}

// callWitness has witness (at peer) acknowledge answers, in calls of maxWitnessBatch.
func (l *Ledger) callWitness(witness, peer string, rev clusterview.Revision, answers []witnessedAnswer) error {
	ctx, cancel := context.WithTimeout(l.ctx, l.witnessTimeout)
	defer cancel()
	for len(answers) > 0 {
		n := min(len(answers), maxWitnessBatch)
		req := peerRequest{
			Namespace: rev.Namespace, Revision: rev.UID, Owner: witness,
			From: l.identity, Answers: encodeAnswers(answers[:n]),
		}
		if _, err := l.callPeer(ctx, peer, req); err != nil {
			return fmt.Errorf("seat witness %s: %w", witness, err)
		}
		answers = answers[n:]
	}
	return nil
}

// awaitWitness waits for b's acknowledgement. On a failure the answer may go out only
// once a record naming no witness has landed, with this replica still the owner and
// the reservation still its: it reports false when that cannot be, and the claim is
// then made again.
func (l *Ledger) awaitWitness(ctx context.Context, s *revState, b *witnessBatch, hash uint64, seat int) (bool, error) {
	select {
	case <-b.done:
	case <-ctx.Done():
		return false, fmt.Errorf("waiting for the seat witness of revision %s: %w", s.rev.UID, ctx.Err())
	}
	if b.err == nil {
		return true, nil
	}
	for {
		l.mu.Lock()
		now := l.clock.Now()
		if !l.owns(s, now) {
			l.mu.Unlock()
			return false, nil
		}
		if s.witnessSettled() {
			e := s.reserved[hash]
			ok := e != nil && e.seat == seat && now.Before(e.expires)
			l.mu.Unlock()
			return ok, nil
		}
		write := l.acquire(s)
		l.mu.Unlock()
		if err := waitWrite(ctx, write, s.rev); err != nil {
			return false, err
		}
	}
}

// acknowledge stores answers that from, the owner of rev, acknowledges through this
// replica as its witness: refused once this replica owns the revision or is taking it
// over, since a takeover under way counts only what it had when it began.
func (l *Ledger) acknowledge(rev clusterview.Revision, from, answers string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.state(rev)
	now := l.clock.Now()
	if l.owns(s, now) || s.writing != nil || l.handedOver {
		return errNotOwner
	}
	of := s.witnessed.of(from)
	expires := now.Add(l.ttl)
	return decodeAnswers(answers, func(hash uint64, seat int) {
		if !s.fulfilled.has(hash, now) {
			of[hash] = &entry{seat: seat, expires: expires}
		}
	})
}

// forwarded records the answer to a claim this replica forwarded to holder: as its
// witness it knows that answer, which holder does not send it separately. l.mu is held.
func (l *Ledger) forwarded(s *revState, holder string, hash uint64, seat int, err error) {
	if s.forwarding--; s.forwarding == 0 {
		l.forwardsDone.Broadcast()
	}
	if err != nil {
		return
	}
	s.witnessed.of(holder)[hash] = &entry{seat: seat, expires: l.clock.Now().Add(l.ttl)}
}

// awaitForwards waits, before a takeover as the record holder's witness, for the
// claims this replica forwarded to that holder to come back: their answers are part of
// what the witness knows. A dead holder's connections fail at once. l.mu is held.
func (l *Ledger) awaitForwards(s *revState) {
	for s.forwarding > 0 && s.record != nil && holderOf(s.record) != l.identity && l.witnessedBy(s, holderOf(s.record)) {
		l.forwardsDone.Wait()
	}
}

// namedWitness is the witness the record of holder names, and the URL it answers at,
// when that is another replica. l.mu is held.
func (l *Ledger) namedWitness(s *revState, holder string) (witness, peer string) {
	if s.record == nil || holderOf(s.record) != holder {
		return "", ""
	}
	witness, peer = s.record.Annotations[strategy.AnnotationSeatWitness], s.record.Annotations[strategy.AnnotationSeatWitnessPeer]
	if witness == "" || witness == l.identity || peer == "" {
		return "", ""
	}
	return witness, peer
}

// toldOwnerGone takes another replica's word that owner, the holder of rev's record,
// is gone, when this replica is its witness: a takeover as the witness is safe whether
// or not the owner still runs (it answers nothing this replica did not acknowledge, and
// this replica acknowledges nothing once it takes over), so a false word costs only a
// change of owner.
func (l *Ledger) toldOwnerGone(rev clusterview.Revision, owner string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.state(rev)
	if holderOf(s.record) == owner && l.witnessedBy(s, owner) {
		l.ownerGone(s, owner, l.clock.Now())
	}
}

// witnessedBy reports whether this replica witnessed the answers of record's holder,
// and record names it the witness: it then knows every seat that holder answered.
func (l *Ledger) witnessedBy(s *revState, holder string) bool {
	return s.record != nil && holder != "" && s.witnessed.owner == holder &&
		s.record.Annotations[strategy.AnnotationSeatWitness] == l.identity
}

// encodeAnswers lists answers as "seat:id-hash" items (hash base 36), comma-separated.
func encodeAnswers(answers []witnessedAnswer) string {
	var b strings.Builder
	b.Grow(len(answers) * 20)
	for i, a := range answers {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(a.seat))
		b.WriteByte(':')
		b.WriteString(strconv.FormatUint(a.hash, 36))
	}
	return b.String()
}

// decodeAnswers calls fn with each answer of an encodeAnswers list; a malformed item
// fails the whole list, which the witness then does not acknowledge.
func decodeAnswers(s string, fn func(hash uint64, seat int)) error {
	for item := range strings.SplitSeq(s, ",") {
		seatText, hashText, ok := strings.Cut(item, ":")
		seat, err1 := strconv.Atoi(seatText)
		hash, err2 := strconv.ParseUint(hashText, 36, 64)
		if !ok || err1 != nil || err2 != nil || seat < 1 || hash == 0 {
			return fmt.Errorf("malformed witnessed answer %q", item)
		}
		fn(hash, seat)
	}
	return nil
}
