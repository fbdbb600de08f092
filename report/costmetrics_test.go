package report

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/awsfake"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// costFixture is a Deployment demo/web of 4 replicas split 1 on-demand, 3 spot: seat 1
// on an on-demand m5.large, seats 2 and 3 on a spot m5.large in eu-west-1a, seat 4 on a
// spot node of a type no source knows. Each pod requests half a node's CPU.
func costFixture() *State {
	node := func(name, capacity, instanceType string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"karpenter.sh/capacity-type": capacity, corev1.LabelInstanceTypeStable: instanceType,
			corev1.LabelTopologyRegion: "eu-west-1", corev1.LabelTopologyZone: "eu-west-1a",
		}}}
		n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi")}
		return n
	}
	owner := func(kind, name string, uid types.UID) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}}
	}
	pod := func(seat int, capacity, nodeName string) corev1.Pod {
		return corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web-" + strconv.Itoa(seat), Namespace: "demo", OwnerReferences: owner("ReplicaSet", "web-1", "rs"),
				Annotations: map[string]string{strategy.AnnotationSeat: strconv.Itoa(seat)}},
			Spec: corev1.PodSpec{NodeName: nodeName, NodeSelector: map[string]string{"capacity": capacity},
				Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		}
	}
	return &State{
		Deployments: []appsv1.Deployment{{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo", UID: "dep",
				Annotations: map[string]string{strategy.AnnotationStrategy: "capacity=on-demand,base=1:capacity=spot"}},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](4)},
		}},
		ReplicaSets: []appsv1.ReplicaSet{{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "demo", UID: "rs",
			Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"}, OwnerReferences: owner("Deployment", "web", "dep")}}},
		Pods: []corev1.Pod{pod(1, "on-demand", "od-1"), pod(2, "spot", "spot-1"), pod(3, "spot", "spot-1"), pod(4, "spot", "mystery")},
		Nodes: map[string]*corev1.Node{
			"od-1": node("od-1", "on-demand", "m5.large"), "spot-1": node("spot-1", "spot", "m5.large"), "mystery": node("mystery", "spot", "x9.huge"),
		},
	}
}

// testRefresher refreshes from st (as Collect would list it) with prices.
func testRefresher(st *State, prices func(context.Context) (pricing.Source, error)) *CostRefresher {
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	return &CostRefresher{
		Collect: func(context.Context) (Report, error) {
			return Build(st, func(string, string) bool { return true }), nil
		},
		Prices:   prices,
		Metrics:  NewCostMetrics("custom_kube_scheduler_webhook"),
		Interval: time.Minute,
		Log:      quiet,
		Now:      func() time.Time { return time.Unix(1_700_000_000, 0) },
	}
}

// tablePrices answers every refresh from table.
func tablePrices(table *pricing.Table) func(context.Context) (pricing.Source, error) {
	return func(context.Context) (pricing.Source, error) { return table, nil }
}

// wantCost is the exposition of the fixture's cost series for one term-1 and term-2
// price pair: usd, on-demand, saving.
func wantCost(t1, t2 [3]string) string {
	const p = "custom_kube_scheduler_webhook_cost_"
	f := func(name, term, v string) string {
		return p + name + `{term="` + term + `",workload="Deployment/web",workload_namespace="demo"} ` + v + "\n"
	}
	var b strings.Builder
	for _, m := range []struct {
		name string
		i    int
	}{{"usd_per_hour", 0}, {"on_demand_usd_per_hour", 1}, {"saving_usd_per_hour", 2}} {
		b.WriteString("# HELP " + p + m.name + " x\n# TYPE " + p + m.name + " gauge\n")
		b.WriteString(f(m.name, "1", t1[m.i]) + f(m.name, "2", t2[m.i]))
	}
	b.WriteString("# HELP " + p + "pods x\n# TYPE " + p + "pods gauge\n")
	b.WriteString(p + `pods{capacity_type="on-demand",term="1",workload="Deployment/web",workload_namespace="demo"} 1` + "\n")
	b.WriteString(p + `pods{capacity_type="spot",term="2",workload="Deployment/web",workload_namespace="demo"} 3` + "\n")
	b.WriteString("# HELP " + p + "unpriced_nodes x\n# TYPE " + p + "unpriced_nodes gauge\n")
	b.WriteString(f("unpriced_nodes", "1", "0") + f("unpriced_nodes", "2", "1"))
	b.WriteString("# HELP " + p + "refresh_timestamp_seconds x\n# TYPE " + p + "refresh_timestamp_seconds gauge\n" + p + "refresh_timestamp_seconds 1.7e+09\n")
	return b.String()
}

// compareCost checks the cost series against want, help texts aside.
func compareCost(t *testing.T, m *CostMetrics, want string) {
	t.Helper()
	names := []string{"usd_per_hour", "on_demand_usd_per_hour", "saving_usd_per_hour", "pods", "unpriced_nodes", "refresh_timestamp_seconds"}
	var full []string
	for _, n := range names {
		full = append(full, "custom_kube_scheduler_webhook_cost_"+n)
	}
	// testutil compares HELP lines too: take the real ones.
	for _, d := range []struct{ name, help string }{
		{"usd_per_hour", "Hourly cost in USD of a workload's term: each node's price times the share of it the term's pods request."},
		{"on_demand_usd_per_hour", "What the term's pods would cost per hour on the same instance types bought on-demand."},
		{"saving_usd_per_hour", "on_demand_usd_per_hour minus usd_per_hour: the hourly saving against all on-demand."},
		{"pods", "Pods of a workload's term on nodes, by the nodes' capacity type (on-demand, spot, unknown); COST_METRICS=on."},
		{"unpriced_nodes", "Nodes of the term's pods that had no price (left out of the cost); the log says why."},
		{"refresh_timestamp_seconds", "Unix time of the last successful cost refresh."},
	} {
		want = strings.Replace(want, "# HELP custom_kube_scheduler_webhook_cost_"+d.name+" x\n", "# HELP custom_kube_scheduler_webhook_cost_"+d.name+" "+d.help+"\n", 1)
	}
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), full...); err != nil {
		t.Fatal(err)
	}
}

// The cost series, priced from a local AWS Price List and spot history endpoint through
// the SDK with the disk cache, as serve prices them.
func TestCostMetricsFromAWS(t *testing.T) {
	fake := awsfake.StartForTest(t, awsfake.Prices{
		OnDemand: map[string]map[string]float64{"eu-west-1": {"m5.large": 0.107}},
		Spot:     map[string]map[string]float64{"eu-west-1a": {"m5.large": 0.041}},
	})
	cachePath := filepath.Join(os.TempDir(), "cost", "prices.json")
	r := testRefresher(costFixture(), pricing.FreshAWS(nil, cachePath))
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Term 1: half an on-demand m5.large. Term 2: a whole spot m5.large (two pods), and a
	// node of an unknown type, unpriced.
	compareCost(t, r.Metrics, wantCost([3]string{"0.0535", "0.0535", "0"}, [3]string{"0.041", "0.107", "0.066"}))
	if fake.Calls("GetProducts") == 0 || fake.Calls("DescribeSpotPriceHistory") == 0 {
		t.Fatal("the prices did not come from the AWS endpoint")
	}
	// The next refresh answers from the disk cache: no more calls for known types.
	calls := fake.Calls("GetProducts") + fake.Calls("DescribeSpotPriceHistory")
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if after := fake.Calls("GetProducts") + fake.Calls("DescribeSpotPriceHistory"); after-calls > 2 {
		t.Errorf("second refresh made %d calls, want only the unknown type's", after-calls)
	}
	// AWS failing: nothing can be priced (the cache is gone too), which is an error, not
	// a cluster that costs nothing: the last good values stay.
	if err := os.Remove(cachePath); err != nil {
		t.Fatal(err)
	}
	fake.SetFailing(true)
	if err := r.Refresh(context.Background()); err == nil || !strings.Contains(err.Error(), "no node could be priced") {
		t.Fatalf("refresh with AWS failing: %v", err)
	}
	compareCost(t, r.Metrics, wantCost([3]string{"0.0535", "0.0535", "0"}, [3]string{"0.041", "0.107", "0.066"}))
}

// A price table prices the same series offline (serve's COST_PRICES_FILE).
func TestCostMetricsFromTable(t *testing.T) {
	table, err := pricing.ParseTable(strings.NewReader("m5.large on-demand * 0.1\nm5.large spot eu-west-1a 0.03\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := testRefresher(costFixture(), tablePrices(table))
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	compareCost(t, r.Metrics, wantCost([3]string{"0.05", "0.05", "0"}, [3]string{"0.03", "0.1", "0.07"}))
}

// A workload that goes (deleted, or its namespace skipped) loses its series at the next
// refresh; a replica that stops refreshing (no longer elected) exports none.
func TestCostMetricsSeriesGoWithTheWorkload(t *testing.T) {
	table, err := pricing.ParseTable(strings.NewReader("m5.large on-demand * 0.1\nm5.large spot * 0.03\n"))
	if err != nil {
		t.Fatal(err)
	}
	st := costFixture()
	r := testRefresher(st, tablePrices(table))
	ctx := context.Background()
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	const usd = "custom_kube_scheduler_webhook_cost_usd_per_hour"
	if n := testutil.CollectAndCount(r.Metrics, usd); n != 2 {
		t.Fatalf("%d %s series, want 2", n, usd)
	}
	r.Skip = func(ns string) bool { return ns == "demo" }
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(r.Metrics, usd); n != 0 {
		t.Fatalf("skipped namespace: %d %s series, want 0", n, usd)
	}
	r.Skip = nil
	st.Deployments = nil
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{usd, "custom_kube_scheduler_webhook_cost_pods", "custom_kube_scheduler_webhook_cost_saving_usd_per_hour"} {
		if n := testutil.CollectAndCount(r.Metrics, name); n != 0 {
			t.Errorf("deleted workload: %d %s series, want 0", n, name)
		}
	}
	r.Metrics.clear()
	if n := testutil.CollectAndCount(r.Metrics); n != 0 {
		t.Errorf("after clear: %d series, want 0", n)
	}
}

// A failed refresh keeps the last values and counts the failure.
func TestCostMetricsFailedRefreshIsCounted(t *testing.T) {
	r := testRefresher(costFixture(), func(context.Context) (pricing.Source, error) { return nil, io.ErrUnexpectedEOF })
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for testutil.CollectAndCount(r.Metrics, "custom_kube_scheduler_webhook_cost_refresh_failures_total") == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	r.Run(ctx)
	if n := testutil.CollectAndCount(r.Metrics, "custom_kube_scheduler_webhook_cost_usd_per_hour"); n != 0 {
		t.Fatalf("%d cost series after a failed refresh, want 0", n)
	}
}

// The idle reserved room beside a term's on-demand pods is a series per term
// (idleFixture: 4 more pods fit on the reservations).
func TestCostMetricsIdleReserved(t *testing.T) {
	table, err := pricing.ParseTable(strings.NewReader("m5.xlarge on-demand * 0.192\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := testRefresher(idleFixture("karpenter.sh/capacity-type=on-demand,kubernetes.io/arch=amd64", "1"), tablePrices(table))
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	const name = "custom_kube_scheduler_webhook_cost_idle_reserved_pods"
	want := "# HELP " + name + " How many more of the term's pods fit in room left on reserved nodes (capacity reservations, Capacity Blocks) while some of them run on on-demand nodes; 0 otherwise.\n" +
		"# TYPE " + name + " gauge\n" + name + `{term="1",workload="Deployment/web",workload_namespace="demo"} 4` + "\n"
	if err := testutil.CollectAndCompare(r.Metrics, strings.NewReader(want), name); err != nil {
		t.Fatal(err)
	}
}
