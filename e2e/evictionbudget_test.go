package e2e

// The churn soak's check of the convergence loop's per-workload budget (soak_test.go),
// a pure function of what the soak saw, so that it is tested here (without a cluster) on
// evictions that break the budget.

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
)

// loopEviction is one eviction by the webhook in the API server's audit log, with what
// the soak's watch saw of the pod.
type loopEviction struct {
	ID, Pod  string    // the pod's UID and name
	Workload string    // its app label
	Revision string    // its workload and revision: app@pod-template-hash (or controller-revision-hash)
	At       time.Time // the audit log's requestReceivedTimestamp
	// ReadySince is when the pod became Ready (its Ready condition's lastTransitionTime,
	// whole seconds) as last seen while it was on a node and not terminating; zero when
	// it was not Ready then.
	ReadySince time.Time
}

// readyPod is a pod seen Ready on a node: a possible replacement of an evicted one.
type readyPod struct {
	ID, Revision string
	Ready        time.Time // its Ready condition's lastTransitionTime
}

// workloadChange is a span within which the soak changed a workload's replicas or
// template: from the start of an operation on it until its ReplicaSets or StatefulSet
// were seen to follow.
type workloadChange struct {
	Workload string
	From, To time.Time
}

// budgetSlack is how long before an eviction its pod must have been Ready for the loop
// to have seen it so, and how early a replacement may have become Ready: a pass plans
// from a snapshot and evicts within its deadline (10 s), and the loop's cache may lag
// the API server. It only makes the check more lenient.
const budgetSlack = 15 * time.Second

// budgetUse is what checkEvictionBudget measured of one revision.
type budgetUse struct {
	Budget    int
	Evictions int // every eviction of its pods
	Costly    int // of pods Ready on a node: those that need room in the budget
	// MaxInFlight is the most costly evictions (the last one included) whose pods had no
	// Ready replacement yet.
	MaxInFlight int
}

// checkEvictionBudget holds the loop's evictions against its per-workload budget
// (CONVERGE_MAX_UNAVAILABLE; docs/design/convergence.md, "Budget"): a pod Ready on a node
// is evicted only while the revision's unavailable pods, its earlier evicted ones
// included, leave room for it; a pod without a node (or not Ready) costs nothing. So,
// per revision, when a Ready pod is evicted, the earlier evictions of Ready pods still in
// flight (none of the revision's pods became Ready since, and the soak did not change
// the workload in between, which can lower the replicas) plus this one are at most the
// budget. It returns what it measured per revision and one line per eviction over the
// budget, naming the evictions still in flight.
func checkEvictionBudget(evictions []loopEviction, ready []readyPod, changes []workloadChange, budget func(workload string) int) (map[string]*budgetUse, []string) {
	evictions = append([]loopEviction(nil), evictions...)
	sort.SliceStable(evictions, func(i, j int) bool { return evictions[i].At.Before(evictions[j].At) })
	evictedAt := map[string]time.Time{}
	for _, e := range evictions {
		if _, ok := evictedAt[e.ID]; !ok {
			evictedAt[e.ID] = e.At
		}
	}
	changed := func(workload string, from, to time.Time) bool {
		for _, c := range changes {
			if c.Workload == workload && !c.From.After(to) && !c.To.Before(from) {
				return true
			}
		}
		return false
	}
	used := map[string]bool{}
	// replaced finds a pod of f's revision that became Ready after f's eviction (less
	// the slack; Ready times are whole seconds, rounded down) and by at: not a pod
	// evicted before f (f's own included), nor one that already counted for another.
	replaced := func(f loopEviction, at time.Time) bool {
		after := f.At.Truncate(time.Second).Add(-budgetSlack)
		for _, r := range ready {
			if r.Revision != f.Revision || used[r.ID] || r.Ready.Before(after) || r.Ready.After(at) {
				continue
			}
			if ev, ok := evictedAt[r.ID]; ok && !ev.After(f.At) {
				continue
			}
			used[r.ID] = true
			return true
		}
		return false
	}
	uses := map[string]*budgetUse{}
	inFlight := map[string][]loopEviction{}
	var over []string
	for _, e := range evictions {
		u := uses[e.Revision]
		if u == nil {
			u = &budgetUse{Budget: budget(e.Workload)}
			uses[e.Revision] = u
		}
		u.Evictions++
		if e.ReadySince.IsZero() || e.ReadySince.After(e.At.Add(-budgetSlack)) {
			continue // no node, not Ready, or not Ready long enough to be sure the loop saw it so
		}
		u.Costly++
		var left []loopEviction
		for _, f := range inFlight[e.Revision] {
			if !changed(e.Workload, f.At, e.At) && !replaced(f, e.At) {
				left = append(left, f)
			}
		}
		if len(left)+1 > u.Budget {
			var names []string
			for _, f := range left {
				names = append(names, fmt.Sprintf("%s at %s", f.Pod, f.At.UTC().Format("15:04:05.000")))
			}
			over = append(over, fmt.Sprintf("%s: Ready pod %s evicted at %s while %d earlier evictions of its Ready pods had no Ready replacement (budget %d): %s",
				e.Revision, e.Pod, e.At.UTC().Format("15:04:05.000"), len(left), u.Budget, strings.Join(names, ", ")))
		}
		inFlight[e.Revision] = append(left, e)
		u.MaxInFlight = max(u.MaxInFlight, len(inFlight[e.Revision]))
	}
	return uses, over
}

func TestCheckEvictionBudget(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	readyLong := at(-60) // Ready for a minute before the evictions
	ev := func(id string, s float64) loopEviction {
		return loopEviction{ID: id, Pod: "web-" + id, Workload: "web", Revision: "web@abc", At: at(s), ReadySince: readyLong}
	}
	budget := func(n int) func(string) int { return func(string) int { return n } }
	stranded := func(e loopEviction) loopEviction { e.ReadySince = time.Time{}; return e }
	other := func(e loopEviction) loopEviction { e.Revision = "web@def"; return e }
	for _, tc := range []struct {
		name      string
		evictions []loopEviction
		ready     []readyPod
		changes   []workloadChange
		budget    int
		over      int
		inFlight  int
		names     string // in the first line over the budget (default: the first eviction)
	}{
		{name: "two Ready pods at once", evictions: []loopEviction{ev("a", 0), ev("b", 0.2)}, budget: 1, over: 1, inFlight: 2},
		{name: "three in a row, each after a minute without a replacement", evictions: []loopEviction{ev("a", 0), ev("b", 60), ev("c", 120)}, budget: 1, over: 2, inFlight: 3},
		{name: "the next after a replacement was Ready", evictions: []loopEviction{ev("a", 0), ev("b", 30)},
			ready: []readyPod{{ID: "a2", Revision: "web@abc", Ready: at(5)}}, budget: 1, inFlight: 1},
		{name: "a replacement Ready only after the next eviction", evictions: []loopEviction{ev("a", 0), ev("b", 30)},
			ready: []readyPod{{ID: "a2", Revision: "web@abc", Ready: at(31)}}, budget: 1, over: 1, inFlight: 2},
		{name: "the evicted pod is not its own replacement", evictions: []loopEviction{ev("a", 0), ev("b", 30)},
			ready: []readyPod{{ID: "a", Revision: "web@abc", Ready: at(-5)}}, budget: 1, over: 1, inFlight: 2},
		{name: "three at once within a budget of 2", evictions: []loopEviction{ev("a", 0), ev("b", 0.1), ev("c", 0.2)}, budget: 2, over: 1, inFlight: 3},
		{name: "one replacement for one eviction", evictions: []loopEviction{ev("a", 0), ev("b", 0.1), ev("c", 30), ev("d", 30.1)},
			ready: []readyPod{{ID: "x", Revision: "web@abc", Ready: at(10)}}, budget: 2, over: 1, inFlight: 3, names: "web-b at 12:00:00.100, web-c at 12:00:30.000"},
		{name: "a replacement evicted later still counted", evictions: []loopEviction{ev("a", 0), ev("a2", 40)},
			ready: []readyPod{{ID: "a2", Revision: "web@abc", Ready: at(2)}}, budget: 1, inFlight: 1},
		{name: "the soak scaled the workload in between", evictions: []loopEviction{ev("a", 0), ev("b", 30)},
			changes: []workloadChange{{Workload: "web", From: at(10), To: at(12)}}, budget: 1, inFlight: 1},
		{name: "another workload's change", evictions: []loopEviction{ev("a", 0), ev("b", 30)},
			changes: []workloadChange{{Workload: "shop", From: at(10), To: at(12)}}, budget: 1, over: 1, inFlight: 2},
		{name: "pods without a node cost nothing", evictions: []loopEviction{stranded(ev("a", 0)), stranded(ev("b", 0.1)), stranded(ev("c", 0.2)), ev("d", 0.3)}, budget: 1, inFlight: 1},
		{name: "a pod Ready just now may have been seen without a node", evictions: []loopEviction{ev("a", 0), func() loopEviction { e := ev("b", 1); e.ReadySince = at(-3); return e }()}, budget: 1, inFlight: 1},
		{name: "each revision its own budget", evictions: []loopEviction{ev("a", 0), other(ev("b", 0.1))}, budget: 1, inFlight: 1},
		{name: "within a budget of 2", evictions: []loopEviction{ev("a", 0), ev("b", 0.1)}, budget: 2, inFlight: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uses, over := checkEvictionBudget(tc.evictions, tc.ready, tc.changes, budget(tc.budget))
			if len(over) != tc.over {
				t.Errorf("%d evictions over the budget, want %d: %q", len(over), tc.over, over)
			}
			if got := uses["web@abc"].MaxInFlight; got != tc.inFlight {
				t.Errorf("at most %d in flight, want %d", got, tc.inFlight)
			}
			names := tc.names
			if names == "" {
				names = "web-a at 12:00:00.000"
			}
			if len(over) > 0 && !strings.Contains(over[0], names) {
				t.Errorf("%q does not name the evictions in flight %s", over[0], names)
			}
		})
	}
}
