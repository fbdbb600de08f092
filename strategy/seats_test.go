package strategy

import (
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Reference vectors: per-term counts of the first N seats (bases first, then
// Sainte-Laguë with ties to the later term), as the README's table lists them.
func TestTargetReferenceVectors(t *testing.T) {
	cases := []struct {
		strategy string
		want     map[int][]int
	}{
		{
			strategy: "nodesize=od4vcpu16gb,base=1,weight=0:nodesize=spot4vcpu16gb,weight=1:nodesize=spot8vcpu32gb,weight=1",
			want:     map[int][]int{1: {1, 0, 0}, 2: {1, 0, 1}, 5: {1, 2, 2}, 10: {1, 4, 5}, 11: {1, 5, 5}, 30: {1, 14, 15}},
		},
		{
			strategy: "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3",
			want:     map[int][]int{1: {1, 0}, 3: {2, 1}, 4: {2, 2}, 5: {3, 2}, 10: {4, 6}, 100: {26, 74}},
		},
		{
			strategy: "a=1:b=1:c=1",
			want:     map[int][]int{1: {0, 0, 1}, 2: {0, 1, 1}, 7: {2, 2, 3}},
		},
		{
			strategy: "karpenter.sh/capacity-type=on-demand,base=2:karpenter.sh/capacity-type=spot",
			want:     map[int][]int{10: {2, 8}},
		},
	}
	for _, c := range cases {
		s := mustParse(t, c.strategy)
		for n, want := range c.want {
			if got := s.Target(n); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: Target(%d) = %v, want %v", c.strategy, n, got, want)
			}
		}
	}
}

func TestSeatsOrder(t *testing.T) {
	s := mustParse(t, "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3")
	// Bases first, then spot (3/1 > 1/1), then a tie 1/1 vs 3/3 goes to the later term.
	want := []int{0, 0, 1, 1, 0, 1}
	if got := s.Seats(6); !reflect.DeepEqual(got, want) {
		t.Fatalf("Seats(6) = %v, want %v", got, want)
	}
	for i, term := range want {
		if got := s.TermOfSeat(i + 1); got != term {
			t.Errorf("TermOfSeat(%d) = %d, want %d", i+1, got, term)
		}
	}
	if s.TermOfSeat(0) != -1 || s.TermOfSeat(-3) != -1 {
		t.Error("TermOfSeat of a seat below 1 must be -1")
	}
	if s.Seats(0) != nil || s.Seats(-1) != nil {
		t.Error("Seats of a non-positive count must be empty")
	}
}

func TestLowestFreeSeat(t *testing.T) {
	cases := []struct {
		held []int
		want int
	}{
		{nil, 1},
		{[]int{1, 2, 3}, 4},
		{[]int{1, 3, 4}, 2},
		{[]int{2, 3}, 1},
	}
	for _, c := range cases {
		held := map[int]bool{}
		for _, s := range c.held {
			held[s] = true
		}
		if got := LowestFreeSeat(held); got != c.want {
			t.Errorf("LowestFreeSeat(%v) = %d, want %d", c.held, got, c.want)
		}
	}
}

// randomStrategy builds a valid strategy string with 1..6 terms.
func randomStrategy(r *rand.Rand) string {
	n := 1 + r.IntN(6)
	terms := make([]string, n)
	anyWeight := false
	for i := range terms {
		parts := []string{"pool=p" + string(rune('a'+i))}
		if r.IntN(3) == 0 {
			parts = append(parts, "base="+strconv.Itoa(r.IntN(5)))
		}
		if r.IntN(2) == 0 {
			w := r.IntN(6)
			anyWeight = anyWeight || w > 0
			parts = append(parts, "weight="+strconv.Itoa(w))
		} else if !strings.Contains(strings.Join(parts, ","), "base=") {
			anyWeight = true // default weight 1
		}
		terms[i] = strings.Join(parts, ",")
	}
	if !anyWeight {
		terms[0] += ",weight=1"
		if strings.Contains(terms[0], "weight=0") {
			terms[0] = "pool=pa,weight=2"
		}
	}
	return strings.Join(terms, ":")
}

// Properties of the seat sequence over many random strategies.
func TestSeatSequenceProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		raw := randomStrategy(r)
		s, err := Parse(raw)
		if err != nil {
			t.Fatalf("random strategy %q did not parse: %v", raw, err)
		}
		const maxN = 120
		seats := s.Seats(maxN)
		prev := make([]int, len(s.Terms))
		for n := 1; n <= maxN; n++ {
			got := s.Target(n)
			sum := 0
			for i, c := range got {
				sum += c
				// House monotone: going from n-1 to n adds exactly one seat.
				if c < prev[i] {
					t.Fatalf("%s: term %d lost a seat from N=%d to N=%d (%v -> %v)", raw, i+1, n-1, n, prev, got)
				}
			}
			if sum != n {
				t.Fatalf("%s: Target(%d) sums to %d", raw, n, sum)
			}
			// The prefix of the sequence is the target.
			counts := make([]int, len(s.Terms))
			for _, term := range seats[:n] {
				counts[term]++
			}
			if !reflect.DeepEqual(counts, got) {
				t.Fatalf("%s: Target(%d) = %v but first %d seats count %v", raw, n, got, n, counts)
			}
			prev = got
		}
		// Bases come first, in annotation order.
		pos := 0
		for i, term := range s.Terms {
			for range term.Base {
				if seats[pos] != i {
					t.Fatalf("%s: seat %d belongs to term %d, want base of term %d", raw, pos+1, seats[pos]+1, i+1)
				}
				pos++
			}
		}
		// A term with weight 0 gets only its base; weighted terms share the rest in
		// proportion (Sainte-Laguë stays within one seat of the exact quota).
		final := s.Target(maxN)
		rest, totalWeight := maxN-totalBase(s), s.totalWeight()
		for i, term := range s.Terms {
			if term.Weight == 0 && final[i] != term.Base {
				t.Fatalf("%s: weight-0 term %d holds %d seats, base is %d", raw, i+1, final[i], term.Base)
			}
			quota := float64(rest) * float64(term.Weight) / float64(totalWeight)
			if d := float64(final[i]-term.Base) - quota; d > 1 || d < -1 {
				t.Fatalf("%s: term %d holds %d weighted seats, quota %.2f", raw, i+1, final[i]-term.Base, quota)
			}
		}
	}
}

// benchStrategies are a small strategy and the largest the grammar allows (20 terms).
var benchStrategies = map[string]string{
	"3terms":  "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3:nodesize=x,weight=7",
	"20terms": twentyTerms,
}

// twentyTerms has the most terms Parse accepts, with distinct weights and a few bases.
const twentyTerms = "p=a,base=3,weight=1000:p=b,weight=999:p=c,weight=7:p=d,base=1,weight=1:p=e,weight=13:" +
	"p=f,weight=500:p=g,weight=2:p=h,weight=3:p=i,weight=5:p=j,weight=11:" +
	"p=k,weight=17:p=l,weight=19:p=m,weight=23:p=n,weight=29:p=o,weight=31:" +
	"p=p,weight=37:p=q,weight=41:p=r,weight=43:p=s,weight=47:p=t,weight=53"

func BenchmarkTermOfSeat(b *testing.B) {
	for _, name := range []string{"3terms", "20terms"} {
		s, err := Parse(benchStrategies[name])
		if err != nil {
			b.Fatal(err)
		}
		for _, seat := range []int{10, 200, 5000, 100000, 10000000, MaxSeat} {
			b.Run(name+"/seat-"+strconv.Itoa(seat), func(b *testing.B) {
				for b.Loop() {
					s.TermOfSeat(seat)
				}
			})
		}
	}
}

func mustParse(t testing.TB, raw string) *Strategy {
	t.Helper()
	s, err := Parse(raw)
	if err != nil {
		t.Fatalf("Parse(%q): %v", raw, err)
	}
	return s
}

// Defect 2: the seat's term is computed, not walked to: seats up to MaxSeat on the
// largest strategy return at once.
func TestTermOfSeatLargeSeatsAreBounded(t *testing.T) {
	s := mustParse(t, twentyTerms)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, seat := range []int{1e8, MaxSeat - 1, MaxSeat} {
			s.TermOfSeat(seat)
			s.Target(seat)
		}
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("TermOfSeat/Target of seats 1e8..MaxSeat still running after 2s")
	}
}

// randomTerms builds 1..MaxTerms terms with random bases and weights (some zero, some
// equal so ties occur), at least one weight above zero.
func randomTerms(r *rand.Rand) []Term {
	terms := make([]Term, 1+r.IntN(MaxTerms))
	for i := range terms {
		terms[i] = Term{Labels: []Label{{Key: "pool", Value: strconv.Itoa(i)}}}
		if r.IntN(3) == 0 {
			terms[i].Base = r.IntN(4)
		}
		switch r.IntN(4) {
		case 0:
			terms[i].Weight = 0
		case 1:
			terms[i].Weight = 1 + r.IntN(3)
		default:
			terms[i].Weight = r.IntN(MaxWeight + 1)
		}
	}
	if (&Strategy{Terms: terms}).totalWeight() == 0 {
		terms[r.IntN(len(terms))].Weight = 1 + r.IntN(MaxWeight)
	}
	return terms
}

// The computed seat → term and target agree with the reference, the seat-by-seat
// Sequence, on random strategies, with and without the prefix cache.
func TestFastSeatsAgreeWithSequence(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		terms := randomTerms(r)
		computed := &Strategy{Terms: terms}                       // hand-built: no cache
		cached := &Strategy{Terms: terms, prefix: &prefixCache{}} // as Parse builds it
		const maxN = 600
		seq, counts := computed.Sequence(), make([]int, len(terms))
		// Ask the cached one out of order, so it grows while being read.
		for _, seat := range []int{maxN, 7, 1} {
			cached.TermOfSeat(seat)
		}
		for seat := 1; seat <= maxN; seat++ {
			want := seq.Next()
			counts[want]++
			if got := computed.TermOfSeat(seat); got != want {
				t.Fatalf("%v: computed TermOfSeat(%d) = %d, sequence says %d", terms, seat, got, want)
			}
			if got := cached.TermOfSeat(seat); got != want {
				t.Fatalf("%v: cached TermOfSeat(%d) = %d, sequence says %d", terms, seat, got, want)
			}
			if got := computed.Target(seat); !reflect.DeepEqual(got, counts) {
				t.Fatalf("%v: Target(%d) = %v, sequence counts %v", terms, seat, got, counts)
			}
		}
		// A few random seats further out, against a sequence walked that far.
		far := 1 + r.IntN(20000)
		seq, counts = computed.Sequence(), make([]int, len(terms))
		last := 0
		for range far {
			last = seq.Next()
			counts[last]++
		}
		if got := computed.TermOfSeat(far); got != last {
			t.Fatalf("%v: TermOfSeat(%d) = %d, sequence says %d", terms, far, got, last)
		}
		if got := computed.Target(far); !reflect.DeepEqual(got, counts) {
			t.Fatalf("%v: Target(%d) = %v, sequence counts %v", terms, far, got, counts)
		}
	}
}

// At seats no sequence can be walked to in a test, the computed functions still agree
// with each other: Target grows by exactly one seat, on TermOfSeat's term, and stays
// near each term's quota (Sainte-Laguë may miss it by more than one seat with many
// terms, never by more than half the number of terms).
func TestLargeSeatsConsistent(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	s := mustParse(t, twentyTerms)
	strategies := []*Strategy{s}
	for range 50 {
		strategies = append(strategies, &Strategy{Terms: randomTerms(r)})
	}
	for _, s := range strategies {
		for _, n := range []int{1e5, 1e7, 1e8 + r.IntN(1e8), MaxSeat - r.IntN(1000), MaxSeat} {
			before, after := s.Target(n-1), s.Target(n)
			term := s.TermOfSeat(n)
			for i := range after {
				want := before[i]
				if i == term {
					want++
				}
				if after[i] != want {
					t.Fatalf("%v: seat %d is term %d but Target(%d)=%v, Target(%d)=%v", s.Terms, n, term, n-1, before, n, after)
				}
			}
			rest, total := n-totalBase(s), s.totalWeight()
			for i, tm := range s.Terms {
				quota := float64(rest) * float64(tm.Weight) / float64(total)
				bound := float64(len(s.Terms))/2 + 1
				if d := float64(after[i]-tm.Base) - quota; d > bound || d < -bound {
					t.Fatalf("%v: Target(%d) gives term %d %d weighted seats, quota %.2f", s.Terms, n, i+1, after[i]-tm.Base, quota)
				}
			}
		}
	}
}

// Seats outside 1..MaxSeat are an error from TermAt and -1 from TermOfSeat, never a
// term index.
func TestSeatRange(t *testing.T) {
	s := mustParse(t, "a=1:b=1")
	for _, seat := range []int{0, -1, MaxSeat + 1, math.MaxInt, math.MinInt} {
		if _, err := s.TermAt(seat); err == nil {
			t.Errorf("TermAt(%d) accepted the seat", seat)
		}
		if got := s.TermOfSeat(seat); got != -1 {
			t.Errorf("TermOfSeat(%d) = %d, want -1", seat, got)
		}
	}
	if _, err := (&Strategy{}).TermAt(1); err == nil {
		t.Error("TermAt on a strategy without terms must fail")
	}
	if got := s.Target(math.MaxInt); got[0]+got[1] != MaxSeat {
		t.Errorf("Target(MaxInt) = %v, want MaxSeat seats", got)
	}
}

// totalBase is the number of seats taken by bases before weighting starts.
func totalBase(s *Strategy) int {
	total := 0
	for _, t := range s.Terms {
		total += t.Base
	}
	return total
}
