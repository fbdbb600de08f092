package converge

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/interruption"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// fakeInterruptions applies the real rule to nodes and signals the test sets.
type fakeInterruptions struct {
	mu      sync.Mutex
	rule    interruption.Rule
	nodes   map[string]map[string]string // name -> labels
	signals map[string]interruption.NodeSignals
}

func (f *fakeInterruptions) Assess(term strategy.Term, now time.Time) interruption.Verdict {
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	for name, labels := range f.nodes {
		if term.SelectedBy(labels) {
			names = append(names, name)
		}
	}
	return f.rule.Assess(names, f.signals, now)
}

func (f *fakeInterruptions) signal(node string, kind interruption.Kind, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.signals[node] = interruption.NodeSignals{Instance: "i-" + node, At: map[interruption.Kind]time.Time{kind: at}}
}

// spotWorld is a Deployment of 12 Ready pods: seat 1 on the on-demand node od, the 11
// spot seats on the spot nodes s1..s4 in turn; the moves' budget is the whole
// workload, so what moves is what the rule allows, not what the budget does.
func spotWorld(t *testing.T) (*world, *fakeInterruptions, map[string]string) {
	t.Helper()
	pods := []*corev1.Pod{pod(1, 1, "on-demand", true, 0)}
	pods[0].Spec.NodeName = "od"
	nodeOf := map[string]string{"web-1": "od"}
	for seat := 2; seat <= 12; seat++ {
		p := pod(seat, 2, "spot", true, 0)
		p.Spec.NodeName = fmt.Sprintf("s%d", 1+(seat-2)%4)
		nodeOf[p.Name] = p.Spec.NodeName
		pods = append(pods, p)
	}
	w := newWorld(t, 12, pods)
	w.loop.cfg.MaxUnavailable = intstr.FromString("100%")
	ir := &fakeInterruptions{rule: interruption.DefaultRule(), signals: map[string]interruption.NodeSignals{},
		nodes: map[string]map[string]string{"od": {"karpenter.sh/capacity-type": "on-demand"}}}
	for i := 1; i <= 4; i++ {
		ir.nodes[fmt.Sprintf("s%d", i)] = map[string]string{"karpenter.sh/capacity-type": "spot"}
	}
	w.loop.cfg.Interruptions = ir
	return w, ir, nodeOf
}

// podsOn lists the pods nodeOf puts on nodes, sorted.
func podsOn(nodeOf map[string]string, nodes ...string) []string {
	var out []string
	for p, n := range nodeOf {
		if slices.Contains(nodes, n) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// Recommendations for three of the term's four nodes: the term is marked at risk with
// the evidence in the record (and nothing moves in that pass); then the pods on the
// three signalled nodes move, and no other.
func TestTermAtRiskMarkedThenSignalledPodsMove(t *testing.T) {
	w, ir, nodeOf := spotWorld(t)
	ctx := context.Background()
	now := time.Now()
	for _, n := range []string{"s1", "s2", "s3"} {
		ir.signal(n, interruption.KindRebalance, now.Add(-30*time.Second))
	}
	w.loop.Pass(ctx)
	rec := w.record(t, "three of four spot nodes signalled: want the term marked at risk")
	st := rec.Terms[1]
	if st.Risk == nil || st.Risk.SignalledNodes != 3 || st.Risk.Nodes != 4 || st.Risk.ByKind[string(interruption.KindRebalance)] != 3 ||
		!strings.Contains(st.Reason, "at risk: EC2 signals for 3 of the term's 4 nodes") {
		t.Fatalf("record %+v (risk %+v), want the evidence of 3 of 4 nodes", st, st.Risk)
	}
	if want := now.Add(30 * time.Second); st.Until.Sub(want).Abs() > time.Second {
		t.Errorf("marked until %s, want a cool-down (1m) after the last signal (%s)", st.Until, want)
	}
	if _, ok := rec.Terms[0]; ok {
		t.Error("the on-demand term was marked too")
	}
	if got := w.evictions(); len(got) != 0 {
		t.Fatalf("evicted %v in the pass that marked the term", got)
	}
	w.waitForRecord(t)
	w.loop.Pass(ctx)
	got := w.evictions()
	sort.Strings(got)
	if want := podsOn(nodeOf, "s1", "s2", "s3"); !slices.Equal(got, want) {
		t.Fatalf("evicted %v, want the pods of the signalled nodes %v (and none of s4 or od)", got, want)
	}
}

// The budget holds for moves off signalled nodes as for any other: 10% of 12 is one
// pod at a time.
func TestSignalledPodsMoveWithinTheBudget(t *testing.T) {
	w, ir, _ := spotWorld(t)
	w.loop.cfg.MaxUnavailable = intstr.FromString("10%")
	ctx := context.Background()
	for _, n := range []string{"s1", "s2", "s3", "s4"} {
		ir.signal(n, interruption.KindInterruption, time.Now())
	}
	w.loop.Pass(ctx)
	w.waitForRecord(t)
	w.loop.Pass(ctx)
	w.loop.Pass(ctx)
	if got := w.evictions(); len(got) != 1 || got[0] != "web-12" {
		t.Fatalf("evicted %v, want only the highest seat (budget 1, the evicted pod still counts)", got)
	}
}

// More signals while the term is marked make the mark last a cool-down after the
// latest, with a tenth of the cool-down to spare; the strikes stay.
func TestMarkAtRiskExtends(t *testing.T) {
	w, ir, _ := spotWorld(t)
	ctx := context.Background()
	first := time.Now().Add(-50 * time.Second)
	for _, n := range []string{"s1", "s2"} {
		ir.signal(n, interruption.KindRebalance, first)
	}
	w.loop.Pass(ctx)
	w.waitForRecord(t)
	before := w.record(t, "marked").Terms[1]
	later := time.Now()
	ir.signal("s3", interruption.KindRebalance, later)
	w.loop.Pass(ctx)
	after := w.record(t, "extended").Terms[1]
	if want := later.Add(time.Minute + 6*time.Second); after.Until.Sub(want).Abs() > time.Second || after.Strikes != before.Strikes || !after.Since.Equal(before.Since) {
		t.Fatalf("after a later signal: until %s strikes %d since %s; want until %s, the strikes and since of %+v", after.Until, after.Strikes, after.Since, want, before)
	}
	if after.Risk.SignalledNodes != 3 {
		t.Errorf("the extended record's evidence counts %d nodes, want 3", after.Risk.SignalledNodes)
	}
}

// One recommendation on one node, the per-node option off: nothing is marked and
// nothing moves. On: that node's pods move, nothing is marked, their seats stay.
func TestSingleSignal(t *testing.T) {
	w, ir, nodeOf := spotWorld(t)
	ctx := context.Background()
	ir.signal("s2", interruption.KindRebalance, time.Now().Add(-time.Second))
	w.loop.Pass(ctx)
	w.loop.Pass(ctx)
	if rec := w.records.Get(rsUID); rec != nil {
		t.Fatalf("one signalled node marked the term: %+v", rec)
	}
	if got := w.evictions(); len(got) != 0 {
		t.Fatalf("per-node option off: evicted %v", got)
	}
	w.loop.cfg.MoveSignalledNodes = true
	w.loop.Pass(ctx)
	got := w.evictions()
	sort.Strings(got)
	if want := podsOn(nodeOf, "s2"); !slices.Equal(got, want) {
		t.Fatalf("per-node option on: evicted %v, want the pods of s2 %v", got, want)
	}
	if _, err := w.client.CoordinationV1().Leases("cksw").Get(ctx, "cksw-unavailable-"+string(rsUID), metav1.GetOptions{}); err == nil {
		t.Error("the per-node option marked the term")
	}
}

// Signals older than the window, or of nodes that are not the term's, act on nothing.
func TestOldOrForeignSignalsDoNothing(t *testing.T) {
	w, ir, _ := spotWorld(t)
	w.loop.cfg.MoveSignalledNodes = true
	ctx := context.Background()
	old := time.Now().Add(-interruption.DefaultWindow - time.Second)
	for _, n := range []string{"s1", "s2", "s3", "s4"} {
		ir.signal(n, interruption.KindRebalance, old)
	}
	// A node of another term and one the strategy does not know.
	ir.signal("od", interruption.KindInterruption, time.Now())
	ir.mu.Lock()
	ir.nodes["gpu1"] = map[string]string{"karpenter.sh/capacity-type": "gpu"}
	ir.mu.Unlock()
	ir.signal("gpu1", interruption.KindInterruption, time.Now())
	w.loop.Pass(ctx)
	w.loop.Pass(ctx)
	if rec := w.records.Get(rsUID); rec != nil {
		t.Fatalf("old signals marked a term: %+v", rec)
	}
	// od is the on-demand term's own node: with the per-node option on, its pod moves,
	// and nothing else.
	if got := w.evictions(); !slices.Equal(got, []string{"web-1"}) {
		t.Fatalf("evicted %v, want only web-1 (on the signalled od node, per-node option on)", got)
	}
}

// Signals within the window but quiet for the cool-down already mark nothing: the term
// would return at once.
func TestQuietSignalsMarkNothing(t *testing.T) {
	w, ir, _ := spotWorld(t)
	for _, n := range []string{"s1", "s2", "s3", "s4"} {
		ir.signal(n, interruption.KindRebalance, time.Now().Add(-2*time.Minute)) // cool-down 1m, window 10m
	}
	w.loop.Pass(context.Background())
	if rec := w.records.Get(rsUID); rec != nil {
		t.Fatalf("marked after a quiet cool-down: %+v", rec)
	}
	if _, err := w.client.CoordinationV1().Leases("cksw").Get(context.Background(), "cksw-unavailable-"+string(rsUID), metav1.GetOptions{}); err == nil {
		t.Fatal("a record was written")
	}
}

// A Capacity Block's end announced for one of the term's four nodes: the term is marked
// (the end is certain, one node is enough) until a cool-down after the block's end, not
// after the warning, so no seat goes back before its nodes are gone; only that node's
// pods move.
func TestCapacityBlockEndMarksUntilItsEnd(t *testing.T) {
	w, ir, nodeOf := spotWorld(t)
	ctx := context.Background()
	now := time.Now()
	end := now.Add(30 * time.Minute)
	ir.mu.Lock()
	ir.signals["s2"] = interruption.NodeSignals{Instance: "i-s2", At: map[interruption.Kind]time.Time{interruption.KindCapacityBlockEnd: now.Add(-15 * time.Minute)}, Ends: end}
	ir.mu.Unlock()
	w.loop.Pass(ctx)
	st := w.record(t, "one node of an ending Capacity Block: want the term marked").Terms[1]
	if want := end.Add(time.Minute); st.Until.Sub(want).Abs() > time.Second {
		t.Errorf("marked until %s, want a cool-down (1m) after the block's end (%s)", st.Until, want)
	}
	if st.Risk == nil || st.Risk.ByKind[string(interruption.KindCapacityBlockEnd)] != 1 || !strings.Contains(st.Reason, "a Capacity Block ends at") {
		t.Errorf("record %+v (risk %+v), want the block's end as the evidence", st, st.Risk)
	}
	w.waitForRecord(t)
	w.loop.Pass(ctx)
	got := w.evictions()
	sort.Strings(got)
	if want := podsOn(nodeOf, "s2"); !slices.Equal(got, want) {
		t.Fatalf("evicted %v, want the pods of the block's node %v", got, want)
	}
}
