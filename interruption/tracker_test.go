package interruption

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// fakeNodes is a node view from a list.
type fakeNodes struct {
	nodes  []Node
	synced bool
}

func (f *fakeNodes) ByInstance(id string) (Node, bool) {
	for _, n := range f.nodes {
		if n.Instance == id {
			return n, true
		}
	}
	return Node{}, false
}

func (f *fakeNodes) Each(fn func(Node)) {
	for _, n := range f.nodes {
		fn(n)
	}
}

func (f *fakeNodes) HasSynced() bool { return f.synced }

func quietLog() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// pools: two spot pools of nodes, spot-a (4 nodes) and spot-b (2), and an on-demand
// node; instance i-<node>.
func pools() *fakeNodes {
	f := &fakeNodes{synced: true}
	add := func(name string, labels map[string]string) {
		f.nodes = append(f.nodes, Node{Name: name, Instance: "i-" + name, Labels: labels})
	}
	for i := range 4 {
		add(fmt.Sprintf("a%d", i), map[string]string{"pool": "spot-a", "karpenter.sh/capacity-type": "spot"})
	}
	for i := range 2 {
		add(fmt.Sprintf("b%d", i), map[string]string{"pool": "spot-b", "karpenter.sh/capacity-type": "spot"})
	}
	add("od0", map[string]string{"karpenter.sh/capacity-type": "on-demand"})
	return f
}

func term(t *testing.T, labels string) strategy.Term {
	t.Helper()
	s, err := strategy.Parse(labels)
	if err != nil {
		t.Fatal(err)
	}
	return s.Terms[0]
}

func newTestTracker(t *testing.T, nodes Nodes, now *time.Time) (*Tracker, *Metrics, *int) {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry(), "test")
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	tr, err := newTracker(trackerConfig{Nodes: nodes, Rule: DefaultRule(), Metrics: m, Log: quietLog(),
		Changed: func() { changed++ }, Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	return tr, m, &changed
}

func TestTrackerMapsInstancesToTerms(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tr, m, changed := newTestTracker(t, pools(), &now)
	want := Origin{Account: "123456789012", Region: "eu-west-1"}
	spotA, spotB, spot := term(t, "pool=spot-a"), term(t, "pool=spot-b"), term(t, "karpenter.sh/capacity-type=spot")
	for _, term := range []strategy.Term{spotA, spotB, spot} {
		tr.Assess(term, now) // the loop asks about its terms: the metrics count for them
	}
	rebalance := func(id, instance string, at time.Time) []byte {
		return []byte(event(id, "EC2 Instance Rebalance Recommendation", want.Account, want.Region, at, fmt.Sprintf(`{"instance-id":%q}`, instance)))
	}
	steps := []struct {
		body   []byte
		result string
	}{
		{rebalance("e1", "i-a0", now.Add(-time.Minute)), resultSignal},
		{rebalance("e1", "i-a0", now.Add(-time.Minute)), resultDuplicate},
		{rebalance("e2", "i-nowhere", now.Add(-time.Minute)), resultUnknownInstance},
		{rebalance("e3", "i-a1", now.Add(-11*time.Minute)), resultStale},
		{[]byte(event("e4", "EC2 Instance Rebalance Recommendation", "999999999999", want.Region, now, `{"instance-id":"i-a1"}`)), resultOtherAccount},
		{[]byte(event("e5", "EC2 Instance Rebalance Recommendation", want.Account, "us-east-1", now, `{"instance-id":"i-a1"}`)), resultOtherRegion},
		{[]byte(event("e6", "EC2 Instance State-change Notification", want.Account, want.Region, now, `{"instance-id":"i-a1","state":"running"}`)), resultIgnored},
		{[]byte("not JSON"), resultMalformed},
	}
	for i, s := range steps {
		if got := tr.Handle(s.body, want); got.Result != s.result || got.Retry {
			t.Fatalf("step %d: %+v, want %s", i, got, s.result)
		}
	}
	if *changed != 1 {
		t.Errorf("Changed called %d times, want once (one new signal)", *changed)
	}
	v := tr.Assess(spotA, now)
	if v.AtRisk || len(v.Signalled) != 1 || v.Nodes != 4 {
		t.Fatalf("spot-a after one signal: at risk %v, %d of %d signalled", v.AtRisk, len(v.Signalled), v.Nodes)
	}
	// A second node of spot-a: half its nodes. Reordered: the later event first.
	tr.Handle(rebalance("e7", "i-a1", now.Add(-time.Second)), want)
	tr.Handle(rebalance("e8", "i-a1", now.Add(-5*time.Minute)), want)
	v = tr.Assess(spotA, now)
	if !v.AtRisk || len(v.Signalled) != 2 {
		t.Fatalf("spot-a after two signals: at risk %v, %d signalled", v.AtRisk, len(v.Signalled))
	}
	if at, _, _, _ := v.Node("a1"); !at.Equal(now.Add(-time.Second)) {
		t.Errorf("a1's signal at %s: the older, reordered event replaced the later one", at)
	}
	if v := tr.Assess(spotB, now); v.AtRisk || len(v.Signalled) != 0 {
		t.Errorf("spot-b: at risk %v with %d signalled, want untouched", v.AtRisk, len(v.Signalled))
	}
	if v := tr.Assess(spot, now); v.AtRisk || len(v.Signalled) != 2 || v.Nodes != 6 {
		t.Errorf("all spot: at risk %v, %d of %d signalled; want 2 of 6, not at risk", v.AtRisk, len(v.Signalled), v.Nodes)
	}
	if got := testutil.ToFloat64(m.signals.WithLabelValues("pool=spot-a", string(KindRebalance))); got != 3 {
		t.Errorf("signals_total{pool=spot-a} = %v, want 3", got)
	}
	if got := testutil.ToFloat64(m.signals.WithLabelValues("pool=spot-b", string(KindRebalance))); got != 0 {
		t.Errorf("signals_total{pool=spot-b} = %v, want 0", got)
	}
	if got := testutil.ToFloat64(m.nodesAtRisk.WithLabelValues("pool=spot-a")); got != 2 {
		t.Errorf("nodes_at_risk{pool=spot-a} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.termAtRisk.WithLabelValues("pool=spot-a")); got != 1 {
		t.Errorf("term_at_risk{pool=spot-a} = %v, want 1", got)
	}
	for result, n := range map[string]float64{resultSignal: 3, resultDuplicate: 1, resultUnknownInstance: 1, resultStale: 1, resultMalformed: 1, resultOtherAccount: 1, resultOtherRegion: 1, resultIgnored: 1} {
		if got := testutil.ToFloat64(m.messages.WithLabelValues(result)); got != n {
			t.Errorf("messages_total{result=%s} = %v, want %v", result, got, n)
		}
	}

	// Ten minutes on, the signals have left the window: nothing is at risk, the gauges
	// say so, and the event keys are forgotten.
	now = now.Add(10 * time.Minute)
	tr.Refresh(now)
	if v := tr.Assess(spotA, now); v.AtRisk || len(v.Signalled) != 0 {
		t.Errorf("spot-a after the window: at risk %v, %d signalled", v.AtRisk, len(v.Signalled))
	}
	if got := testutil.ToFloat64(m.termAtRisk.WithLabelValues("pool=spot-a")); got != 0 {
		t.Errorf("term_at_risk{pool=spot-a} = %v after the window, want 0", got)
	}
	if len(tr.seen) != 0 || len(tr.signals) != 0 {
		t.Errorf("after the window %d event keys and %d nodes' signals kept", len(tr.seen), len(tr.signals))
	}
}

func TestTrackerWaitsForTheNodeView(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	nodes := pools()
	nodes.synced = false
	tr, m, _ := newTestTracker(t, nodes, &now)
	body := []byte(event("e1", "EC2 Spot Instance Interruption Warning", "1", "r", now, `{"instance-id":"i-a0"}`))
	if got := tr.Handle(body, Origin{}); !got.Retry {
		t.Fatalf("before the node view synced: %+v, want Retry", got)
	}
	if got := testutil.ToFloat64(m.messages.WithLabelValues(resultSignal)); got != 0 {
		t.Errorf("a retried message was counted")
	}
	nodes.synced = true
	if got := tr.Handle(body, Origin{}); got.Result != resultSignal {
		t.Fatalf("after: %+v", got)
	}
}

func TestTrackerClampsFutureTimes(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tr, _, _ := newTestTracker(t, pools(), &now)
	for i, node := range []string{"a0", "a1"} {
		body := []byte(event(fmt.Sprint(i), "EC2 Instance Rebalance Recommendation", "1", "r", now.Add(time.Hour), fmt.Sprintf(`{"instance-id":"i-%s"}`, node)))
		tr.Handle(body, Origin{})
	}
	// A clock an hour ahead must not keep the term at risk for an hour longer.
	v := tr.Assess(term(t, "pool=spot-a"), now)
	if !v.AtRisk || !v.Last.Equal(now) {
		t.Fatalf("at risk %v, last %s; want at risk with the signals taken at now", v.AtRisk, v.Last)
	}
	now = now.Add(DefaultWindow)
	tr.Refresh(now)
	if v := tr.Assess(term(t, "pool=spot-a"), now); v.AtRisk {
		t.Error("still at risk a window later")
	}
}
