package converge

// Memory: what the loop remembers between passes of one term of leadership. Every
// write to it is in this file; a new leader starts afresh from the API server.

import (
	"maps"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// memory is the loop's remembered state. Its maps are keyed by revision UID or by
// typed keys that name their revision, so a revision is forgotten without parsing keys.
type memory struct {
	evicted  map[types.UID]time.Time // pods evicted, until the cache shows them gone
	offSince map[types.UID]time.Time // revision not at its placement since
	suspect  map[types.UID]int       // passes a revision had fewer placed pods than replicas
	listed   map[types.UID]time.Time // last live listing of a revision's pods that found none unplaced
	said     map[noteKey]bool        // notes said once (note.go)
	stuck    map[types.UID]bool      // "no term to fall back on" said
	blocked  map[types.UID]string    // why moves wait, as last said
	// returning: the last canary evicted to return to a term.
	returning map[revisionTerm]time.Time
	results   map[types.UID]result // each passed revision's last result, summed in sums
	sums      passSums
	// repeats: the repeat guard's state of each revision and reason it moved pods for.
	repeats map[revisionReason]*repeat
	// windowMoves counts the moves made in an opening of a revision's window, for its
	// cap (lost with leadership: a new leader may make the cap's moves again).
	windowMoves map[revisionOpening]int
	// moving counts, per revision, the pods the loop evicted from a node that are not
	// available again yet (no Ready replacement): what the cluster-wide pace holds
	// (lost with leadership: a new leader counts afresh).
	moving map[types.UID]inFlight
	// paced holds the revisions whose moves wait for the pace, by their place in the
	// order the pace serves them.
	paced map[types.UID]paceKey
}

// inFlight is a revision's pods in flight: evicted by the loop, not Ready again.
type inFlight struct {
	namespace string
	pods      int
}

// paceKey is a revision's place in the pace's order: namespace, then workload name.
type paceKey struct{ namespace, name string }

func (k paceKey) before(o paceKey) bool {
	return k.namespace < o.namespace || (k.namespace == o.namespace && k.name < o.name)
}

// revisionReason names the moves of one revision for one reason.
type revisionReason struct {
	revision types.UID
	reason   string
}

// repeat is the repeat guard's state of one revisionReason: a round of moves, and the
// holds that followed when the moved pods' replacements came back in the same state.
// A replacement is told by its UID, not by time: a pod to move for the reason that was
// not among those the round started with (clocks of the API server and the webhook's
// nodes need not agree, and creation times have whole seconds).
type repeat struct {
	round map[types.UID]bool // the pods to move when the round started (nil: no round on)
	holds int                // holds in a row
	until time.Time          // held until (zero: not held)
}

// guarded reports whether moves for reason are under the repeat guard: the repairs whose
// replacements the webhook places where they belong. Stranded pods, returns and
// interruptions have their own bounds (the unavailability records' growing cool-downs).
func guarded(reason string) bool {
	switch reason {
	case MoveUnplaced, MoveDrift, MoveSeatAbove, MoveSeatTwice:
		return true
	}
	return false
}

// holdFor is how long the n-th hold in a row lasts: 20 seconds, doubling up to 16
// minutes. The first is short: a webhook that was down for a moment and is back again
// delays the repair little; a cause that stays is moved for about once per hold.
func holdFor(n int) time.Duration {
	return min(20*time.Second<<min(max(n-1, 0), 6), 16*time.Minute)
}

// repeatOf says whether a move of m's reason is held now (held), or m's pod came back
// in the same state after a round of moves for the reason (again): both keep m from
// moving.
func (m *memory) repeatOf(rev types.UID, mv move, now time.Time) (held, again bool) {
	r := m.repeats[revisionReason{rev, mv.reason}]
	switch {
	case r == nil || !guarded(mv.reason):
		return false, false
	case now.Before(r.until):
		return true, false
	}
	return false, r.round != nil && !r.round[mv.pod.UID]
}

// noteMoved starts a round of moves for key with the pods planned to move for its
// reason, unless one is on.
func (m *memory) noteMoved(key revisionReason, planned []move) {
	if !guarded(key.reason) {
		return
	}
	r := m.repeats[key]
	if r == nil {
		r = &repeat{}
		m.repeats[key] = r
	}
	if r.round != nil {
		return
	}
	r.round = map[types.UID]bool{}
	for _, mv := range planned {
		if mv.reason == key.reason {
			r.round[mv.pod.UID] = true
		}
	}
}

// hold holds key's moves for the next hold in a row and returns until when; the round
// after it starts afresh.
func (m *memory) hold(key revisionReason, now time.Time) time.Time {
	r := m.repeats[key]
	if r == nil {
		r = &repeat{}
		m.repeats[key] = r
	}
	r.holds++
	r.until, r.round = now.Add(holdFor(r.holds)), nil
	return r.until
}

// settled forgets the repeat guard's state of a revision found at its target.
func (m *memory) settled(uid types.UID) {
	maps.DeleteFunc(m.repeats, func(k revisionReason, _ *repeat) bool { return k.revision == uid })
}

// heldRevisions counts the revisions held at least once since they were last at their
// target.
func (m *memory) heldRevisions() int {
	held := map[types.UID]bool{}
	for k, r := range m.repeats {
		if r.holds > 0 {
			held[k.revision] = true
		}
	}
	return len(held)
}

// revisionTerm names one term of one revision.
type revisionTerm struct {
	revision types.UID
	term     int
}

func newMemory() memory {
	return memory{
		evicted: map[types.UID]time.Time{}, offSince: map[types.UID]time.Time{}, suspect: map[types.UID]int{},
		listed: map[types.UID]time.Time{}, said: map[noteKey]bool{}, stuck: map[types.UID]bool{},
		blocked: map[types.UID]string{}, returning: map[revisionTerm]time.Time{},
		results: map[types.UID]result{}, sums: newPassSums(), repeats: map[revisionReason]*repeat{},
		windowMoves: map[revisionOpening]int{}, moving: map[types.UID]inFlight{}, paced: map[types.UID]paceKey{},
	}
}

// stillUnavailable bounds the revision's pods in flight by its pods unavailable now
// (fewer than replicas Ready, the evicted ones not counted Ready): a Ready replacement
// ends one.
func (m *memory) stillUnavailable(uid types.UID, unavailable int) {
	f, ok := m.moving[uid]
	switch {
	case !ok:
	case min(f.pods, unavailable) <= 0:
		delete(m.moving, uid)
	default:
		f.pods = min(f.pods, unavailable)
		m.moving[uid] = f
	}
}

// noteInFlight counts an eviction of a pod with a node of the revision in namespace.
func (m *memory) noteInFlight(uid types.UID, namespace string) {
	f := m.moving[uid]
	f.namespace = namespace
	f.pods++
	m.moving[uid] = f
}

// inFlight counts the pods in flight in the cluster and in namespace.
func (m *memory) inFlight(namespace string) (cluster, inNamespace int) {
	for _, f := range m.moving {
		cluster += f.pods
		if f.namespace == namespace {
			inNamespace += f.pods
		}
	}
	return cluster, inNamespace
}

// waitsForPace notes whether the revision's moves wait for the pace now.
func (m *memory) waitsForPace(uid types.UID, key paceKey, waits bool) {
	if waits {
		m.paced[uid] = key
	} else {
		delete(m.paced, uid)
	}
}

// pacedBefore reports whether a revision other than uid, before key in the order,
// waits for the pace and could go now (room reports whether a namespace has room):
// the pace's room goes to it first.
func (m *memory) pacedBefore(uid types.UID, key paceKey, room func(namespace string) bool) bool {
	for other, k := range m.paced {
		if other != uid && k.before(key) && room(k.namespace) {
			return true
		}
	}
	return false
}

// noteWindowMove counts a move made in an opening of a revision's window, and forgets
// its earlier openings.
func (m *memory) noteWindowMove(key revisionOpening) {
	maps.DeleteFunc(m.windowMoves, func(k revisionOpening, _ int) bool { return k.revision == key.revision && !k.start.Equal(key.start) })
	m.windowMoves[key]++
}

// wasEvicted reports whether the loop evicted the pod and the cache still shows it.
func (m *memory) wasEvicted(uid types.UID) bool {
	_, ok := m.evicted[uid]
	return ok
}

// shouldList counts a pass in which the revision had fewer placed pods than replicas
// (short) and says whether to list its pods for unplaced ones now: when the count stays
// short twice in a row (a burst being admitted is short once), and at most every 10 s
// while listings find none (pods that cannot be created, a quota).
func (m *memory) shouldList(uid types.UID, short bool, now time.Time) bool {
	if !short {
		delete(m.suspect, uid)
		delete(m.listed, uid)
		return false
	}
	m.suspect[uid]++
	last, listed := m.listed[uid]
	return m.suspect[uid] >= 2 && (!listed || now.Sub(last) >= 10*time.Second)
}

// listedNone notes a listing that found no unplaced pod.
func (m *memory) listedNone(uid types.UID, now time.Time) { m.listed[uid] = now }

// short reports whether the revision had fewer placed pods than replicas last pass.
func (m *memory) short(uid types.UID) bool { return m.suspect[uid] > 0 }

// noteEviction remembers an evicted pod, and a canary sent back to its term.
func (m *memory) noteEviction(pod types.UID, back *revisionTerm, now time.Time) {
	m.evicted[pod] = now
	if back != nil {
		m.returning[*back] = now
	}
}

// sayOnce reports whether key was not said yet, and marks it said.
func (m *memory) sayOnce(key noteKey) bool {
	if m.said[key] {
		return false
	}
	m.said[key] = true
	return true
}

// sayStuck reports whether "no term to fall back on" is to be said for the revision:
// once while it stays stuck.
func (m *memory) sayStuck(uid types.UID, stuck bool) bool {
	if !stuck {
		delete(m.stuck, uid)
		return false
	}
	if m.stuck[uid] {
		return false
	}
	m.stuck[uid] = true
	return true
}

// sayBlocked reports whether why moves of the revision wait (key) differs from what
// was said last, and remembers it.
func (m *memory) sayBlocked(uid types.UID, key string) bool {
	if m.blocked[uid] == key {
		return false
	}
	m.blocked[uid] = key
	return true
}

// unblocked forgets why moves waited: nothing does now.
func (m *memory) unblocked(uid types.UID) { delete(m.blocked, uid) }

// noteResult keeps res as the revision's last result, in the sums and in how long it
// has been off its placement.
func (m *memory) noteResult(uid types.UID, res result, now time.Time) {
	if old, ok := m.results[uid]; ok {
		m.sums.add(old, -1)
	}
	m.results[uid] = res
	m.sums.add(res, 1)
	if !res.off {
		delete(m.offSince, uid)
	} else if _, ok := m.offSince[uid]; !ok {
		m.offSince[uid] = now
	}
}

// forget drops everything remembered of a revision; it reports whether the revision had
// a result in the sums (the gauges need publishing again).
func (m *memory) forget(uid types.UID) bool {
	old, had := m.results[uid]
	if had {
		m.sums.add(old, -1)
		delete(m.results, uid)
	}
	delete(m.offSince, uid)
	delete(m.suspect, uid)
	delete(m.listed, uid)
	delete(m.stuck, uid)
	delete(m.blocked, uid)
	maps.DeleteFunc(m.said, func(k noteKey, _ bool) bool { return k.revision == uid })
	maps.DeleteFunc(m.returning, func(k revisionTerm, _ time.Time) bool { return k.revision == uid })
	maps.DeleteFunc(m.windowMoves, func(k revisionOpening, _ int) bool { return k.revision == uid })
	delete(m.moving, uid)
	delete(m.paced, uid)
	m.settled(uid)
	return had
}

// expireEvictions forgets evictions the cache has had a minute to show.
func (m *memory) expireEvictions(now time.Time) {
	maps.DeleteFunc(m.evicted, func(_ types.UID, at time.Time) bool { return now.Sub(at) > time.Minute })
}

// passSums is the sum of the revisions' last results, kept as they change.
type passSums struct {
	fallbackPods, pending                 int
	waiting                               [waitKinds]int
	target, placed, unavailable, unserved map[termSource]int
	// states counts the revisions by their strategy.Judge verdict.
	states map[strategy.State]int
}

// termSource keys the sums: a term's label string and where the revision's strategy
// came from (the gauges' labels).
type termSource struct {
	term   string
	source strategy.Origin
}

func newPassSums() passSums {
	return passSums{target: map[termSource]int{}, placed: map[termSource]int{}, unavailable: map[termSource]int{}, unserved: map[termSource]int{}, states: map[strategy.State]int{}}
}

// add adds sign times r.
func (s *passSums) add(r result, sign int) {
	s.fallbackPods += sign * r.fallbackPods
	s.pending += sign * r.pending
	for i, n := range r.waiting {
		s.waiting[i] += sign * n
	}
	if r.state != "" {
		s.states[r.state] += sign
	}
	for _, m := range []struct{ sum, r map[termSource]int }{{s.target, r.target}, {s.placed, r.placed}, {s.unavailable, r.unavailable}, {s.unserved, r.unserved}} {
		for term, n := range m.r {
			if m.sum[term] += sign * n; m.sum[term] == 0 {
				delete(m.sum, term)
			}
		}
	}
}
