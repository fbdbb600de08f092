package ledger

import (
	"reflect"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
)

func TestRecentIDsExpireWithoutNewAdds(t *testing.T) {
	r := newRecentIDs()
	t0 := time.Unix(1_000_000, 0)
	const keep = time.Minute
	for i := range uint64(5000) {
		r.add(i+1, t0, t0.Add(keep))
	}
	if !r.has(42, t0.Add(keep-time.Second)) || r.len() != 5000 {
		t.Fatalf("before their time: has(42) %v, len %d", r.has(42, t0.Add(keep-time.Second)), r.len())
	}
	// An id added again later stays under its later time.
	r.add(7, t0.Add(10*time.Second), t0.Add(10*time.Second+keep))
	r.expire(t0.Add(keep))
	if r.has(42, t0.Add(keep)) || !r.has(7, t0.Add(keep)) {
		t.Fatalf("after the first ids' time: has(42) %v, has(7) %v", r.has(42, t0.Add(keep)), r.has(7, t0.Add(keep)))
	}
	if r.len() != 1 || len(r.queue)-r.head != 1 {
		t.Fatalf("after expiry %d ids and %d queued are kept, want 1 and 1", r.len(), len(r.queue)-r.head)
	}
	if cap(r.queue) > 64 {
		t.Fatalf("the queue keeps room for %d ids after its burst", cap(r.queue))
	}
	r.expire(t0.Add(10*time.Second + keep))
	if r.len() != 0 || r.has(7, t0.Add(10*time.Second+keep)) {
		t.Fatalf("after every id's time: len %d", r.len())
	}
}

// Once a burst's reservations and fulfilled ids are all gone, the sweep gives their
// room back: the maps are new ones.
func TestSweepGivesABurstsRoomBack(t *testing.T) {
	l := &Ledger{ttl: time.Second, clock: clocktesting.NewFakeClock(time.Unix(1_000_000, 0)), revs: map[clusterview.Revision]*revState{}}
	s := l.state(shopRS)
	for i := range uint64(5000) {
		now := l.clock.Now()
		l.hold(s, i+1, &entry{seat: int(i) + 1, expires: now.Add(l.ttl)})
		l.fulfil(s, i+1)
	}
	// A placed pod keeps the revision's state alive.
	s.pods["pod"] = 1
	reserved, fulfilled := reflect.ValueOf(s.reserved).UnsafePointer(), s.fulfilled
	l.clock.(*clocktesting.FakeClock).Step(3 * l.ttl)
	l.forget(s)
	if l.revs[shopRS] != s {
		t.Fatal("a revision with a placed pod was forgotten")
	}
	if len(s.reserved) != 0 || s.fulfilled.len() != 0 || s.expiries.Len() != 0 {
		t.Fatalf("after the burst: %d reservations, %d fulfilled ids, %d expiries", len(s.reserved), s.fulfilled.len(), s.expiries.Len())
	}
	if reflect.ValueOf(s.reserved).UnsafePointer() == reserved || s.fulfilled == fulfilled || s.expiries.items != nil {
		t.Fatal("the burst's maps and queues are kept after it ended")
	}
}
