package webhook

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// heldMap is a HeldSeats whose pods the test moves in and out.
type heldMap struct {
	mu    sync.Mutex
	seats map[types.UID]map[int]bool
}

func (h *heldMap) Held(rev types.UID) map[int]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[int]bool{}
	for s := range h.seats[rev] {
		out[s] = true
	}
	return out
}

func (h *heldMap) set(rev types.UID, seats ...int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seats[rev] = map[int]bool{}
	for _, s := range seats {
		h.seats[rev][s] = true
	}
}

func TestLedgerClaims(t *testing.T) {
	ctx := context.Background()
	held := &heldMap{seats: map[types.UID]map[int]bool{}}
	held.set("rs", 1, 2, 4)
	l := NewMemoryLedger(held, time.Minute)
	clock := time.Unix(1000, 0)
	l.now = func() time.Time { return clock }

	claim := func(uid types.UID) int {
		seat, err := l.Claim(ctx, "rs", uid)
		if err != nil {
			t.Fatal(err)
		}
		return seat
	}
	if s := claim("a"); s != 3 {
		t.Fatalf("lowest free seat is 3, got %d", s)
	}
	if s := claim("a"); s != 3 {
		t.Fatalf("a retried admission keeps seat 3, got %d", s)
	}
	if s := claim("b"); s != 5 {
		t.Fatalf("next free seat is 5, got %d", s)
	}
	if s, _ := l.Peek(ctx, "rs"); s != 6 {
		t.Fatalf("Peek = %d, want 6", s)
	}
	if s, _ := l.Peek(ctx, "other"); s != 1 {
		t.Fatalf("revisions are separate: Peek = %d, want 1", s)
	}
	l.Release(ctx, "rs", "b")
	if s := claim("c"); s != 5 {
		t.Fatalf("a released seat is handed out again, got %d", s)
	}

	// Pod of "a" (seat 3) shows up, then is deleted: the seat is free at once, not at
	// the reservation's expiry.
	held.set("rs", 1, 2, 3, 4)
	if s := claim("d"); s != 6 {
		t.Fatalf("got %d, want 6", s)
	}
	held.set("rs", 1, 2, 4)
	if s := claim("e"); s != 3 {
		t.Fatalf("a deleted pod's seat goes to the next pod, got %d", s)
	}

	// A reservation whose pod never appears expires.
	clock = clock.Add(2 * time.Minute)
	if s := claim("f"); s != 3 {
		t.Fatalf("after expiry the lowest free seat is 3 again, got %d", s)
	}
	if n := l.Reservations(); n != 1 {
		t.Fatalf("%d reservations left, want 1", n)
	}
}

func TestLedgerConcurrentClaimsAreDistinct(t *testing.T) {
	l := NewMemoryLedger(&heldMap{seats: map[types.UID]map[int]bool{}}, time.Minute)
	const n = 500
	seats := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seats[i], _ = l.Claim(context.Background(), "rs", types.UID(rune(i)+'0'))
		}()
	}
	wg.Wait()
	seen := map[int]bool{}
	for _, s := range seats {
		if s < 1 || s > n || seen[s] {
			t.Fatalf("seat %d out of range or handed out twice", s)
		}
		seen[s] = true
	}
}

func BenchmarkLedgerClaim(b *testing.B) {
	held := &heldMap{seats: map[types.UID]map[int]bool{}}
	seats := make([]int, 500)
	for i := range seats {
		seats[i] = i + 1
	}
	held.set("rs", seats...)
	l := NewMemoryLedger(held, time.Minute)
	i := 0
	for b.Loop() {
		i++
		uid := types.UID(string(rune(i)))
		if _, err := l.Claim(context.Background(), "rs", uid); err != nil {
			b.Fatal(err)
		}
		l.Release(context.Background(), "rs", uid)
	}
}
