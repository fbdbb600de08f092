package unavailability

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// A term's cool-down doubles with each strike, up to 16 times the base.
func TestCooldownGrows(t *testing.T) {
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 8 * time.Minute}
	for i, w := range want {
		if got := cooldownFor(30*time.Second, i+1); got != w {
			t.Errorf("cool-down after %d strikes = %s, want %s", i+1, got, w)
		}
	}
}

// A term marked at risk carries its evidence; marks while it is active extend it
// without new strikes; a mark on a term already unavailable for want of capacity keeps
// that reason and end.
func TestMarkAtRisk(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	r := NewRecords(client, "cksw")
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }
	const cooldown = time.Minute
	risk := Risk{SignalledNodes: 3, Nodes: 4, ByKind: map[string]int{"rebalance-recommendation": 3}, Window: "10m0s", LastSignal: now, Instances: []string{"i-1", "i-2", "i-3"}}
	read := func(term int) TermState {
		t.Helper()
		lease, err := client.CoordinationV1().Leases("cksw").Get(ctx, RecordName("rev"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := DecodeRecord(lease)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Terms[term]
	}

	st, err := r.MarkAtRisk(ctx, "rev", "Deployment ns/app", 1, "at risk", risk, now.Add(cooldown), cooldown)
	if err != nil || st.Strikes != 1 || !st.Until.Equal(now.Add(cooldown)) || st.Risk == nil {
		t.Fatalf("first mark: %+v, %v", st, err)
	}
	if got := read(1); got.Risk == nil || got.Risk.SignalledNodes != 3 || got.Risk.ByKind["rebalance-recommendation"] != 3 || !got.Risk.LastSignal.Equal(now) {
		t.Fatalf("the record's evidence: %+v", got.Risk)
	}
	// More signals 20 s on: the mark lasts a cool-down after the last one.
	now = now.Add(20 * time.Second)
	st, _ = r.MarkAtRisk(ctx, "rev", "Deployment ns/app", 1, "at risk", risk, now.Add(cooldown), cooldown)
	if st.Strikes != 1 || !st.Until.Equal(now.Add(cooldown)) || !st.Since.Equal(now.Add(-20*time.Second)) {
		t.Fatalf("extended: %+v", st)
	}
	// An earlier until never shortens it.
	st, _ = r.MarkAtRisk(ctx, "rev", "Deployment ns/app", 1, "at risk", risk, now, cooldown)
	if !st.Until.Equal(now.Add(cooldown)) {
		t.Fatalf("shortened to %s", st.Until)
	}
	// Over, then at risk again soon after: a strike in a row.
	now = now.Add(2 * cooldown)
	st, _ = r.MarkAtRisk(ctx, "rev", "Deployment ns/app", 1, "at risk", risk, now.Add(cooldown), cooldown)
	if st.Strikes != 2 {
		t.Fatalf("again after the cool-down: %d strikes, want 2", st.Strikes)
	}
	// Term 0 is unavailable for want of capacity, for longer: that stays.
	stranded, _ := r.Strike(ctx, "rev", "Deployment ns/app", 0, "4 pods unschedulable for 3m", 5*cooldown)
	st, _ = r.MarkAtRisk(ctx, "rev", "Deployment ns/app", 0, "at risk", risk, now.Add(cooldown), cooldown)
	if !st.Until.Equal(stranded.Until) || st.Reason != "4 pods unschedulable for 3m; at risk" || st.Strikes != 1 {
		t.Fatalf("at risk on a stranded term: %+v", st)
	}
}
