package ledger

import (
	"reflect"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
)

// Once a burst's reservations are all gone, the sweep gives their room back: the maps
// are new ones.
func TestSweepGivesABurstsRoomBack(t *testing.T) {
	l := &Ledger{cfg: Settings{ReservationTTL: time.Second}, clock: clocktesting.NewFakeClock(time.Unix(1_000_000, 0)), revs: map[clusterview.Revision]*revState{}}
	s := l.state(shopRS)
	for i := range uint64(5000) {
		now := l.clock.Now()
		l.hold(s, i+1, &entry{seat: int(i) + 1, expires: now.Add(l.cfg.ReservationTTL)})
		s.uncount(s.reserved[i+1]) // its pod is seen
	}
	// A placed pod keeps the revision's state alive.
	s.pods["pod"] = podSeat{seat: 1}
	reserved := reflect.ValueOf(s.reserved).UnsafePointer()
	l.clock.(*clocktesting.FakeClock).Step(3 * l.cfg.ReservationTTL)
	l.forget(s)
	if l.revs[shopRS] != s {
		t.Fatal("a revision with a placed pod was forgotten")
	}
	if len(s.reserved) != 0 || s.expiries.Len() != 0 {
		t.Fatalf("after the burst: %d reservations, %d expiries", len(s.reserved), s.expiries.Len())
	}
	if reflect.ValueOf(s.reserved).UnsafePointer() == reserved || s.expiries.items != nil {
		t.Fatal("the burst's maps and queues are kept after it ended")
	}
}
