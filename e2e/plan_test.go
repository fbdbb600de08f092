//go:build e2e

package e2e

// plan --cluster and --cost against the local cluster: NodePools with limits, one of
// them partly used by a running workload; prices from a local endpoint that speaks the
// AWS protocols (internal/awsfake), reached by the CLI's real SDK clients.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/awsfake"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/plan"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/unavailability"
)

const (
	planInstanceType = "s-4x-amd64-linux"
	planStrategy     = "e2eplan=od,base=2,weight=1:e2eplan=spot,weight=3"
	planSpotPool     = "e2e-plan-spot"
)

// planPool is a NodePool for the plan tests: template label e2eplan=<label>, one
// capacity type and instance type, optional CPU limit and taint.
func planPool(name, label, capacity, cpuLimit string, taint bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: %s
spec:
  template:
    metadata:
      labels: {e2eplan: %s}
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [%s]}
        - {key: node.kubernetes.io/instance-type, operator: In, values: [%s]}
`, name, label, capacity, planInstanceType)
	if taint {
		b.WriteString("      taints: [{key: e2eplan-spot, value: \"true\", effect: NoSchedule}]\n")
	}
	if cpuLimit != "" {
		fmt.Fprintf(&b, "  limits: {cpu: %s}\n", cpuLimit)
	}
	b.WriteString("  disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 1m}\n")
	return b.String()
}

// cli runs the product's CLI against the e2e cluster; it returns stdout, stderr and
// the exit status.
func cli(ctx context.Context, t *testing.T, extraEnv []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, env.bin, append(args, "--kubeconfig", env.hc.Kubeconfig())...)
	cmd.Env = append(os.Environ(), extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &exit):
		return stdout.String(), stderr.String(), exit.ExitCode()
	}
	t.Fatalf("running %v: %v", args, err)
	return "", "", -1
}

// poolCPUUsed waits until the NodePool reports CPU in use, unchanged over two reads.
func poolCPUUsed(ctx context.Context, t *testing.T, name string) resource.Quantity {
	t.Helper()
	var last string
	stable := 0
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		out, _, err := kubectl(ctx, "", "get", "nodepool", name, "-o", "jsonpath={.status.resources.cpu}")
		if err != nil || out == "" || out == "0" {
			return false, nil
		}
		if out == last {
			stable++
		} else {
			last, stable = out, 0
		}
		return stable >= 2, nil
	})
	if err != nil {
		t.Fatalf("NodePool %s never reported CPU in use (last %q)", name, last)
	}
	return resource.MustParse(last)
}

func setPoolCPULimit(ctx context.Context, t *testing.T, name string, limit resource.Quantity) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"limits":{"cpu":%q}}}`, limit.String())
	if _, stderr, err := kubectl(ctx, "", "patch", "nodepool", name, "--type", "merge", "-p", patch); err != nil {
		t.Fatalf("patching NodePool %s: %v\n%s", name, err, stderr)
	}
}

// firstShort is the first replica count whose target for term exceeds room.
func firstShort(t *testing.T, raw string, term, room, maxN int) int {
	t.Helper()
	s, err := strategy.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= maxN; n++ {
		if s.Target(n)[term] > room {
			return n
		}
	}
	return 0
}

func TestPlanClusterLimitedNodePoolThenRaised(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "e2e-plan")
	applyNodePool(ctx, t, planPool("e2e-plan-od", "od", "on-demand", "", false))
	applyNodePool(ctx, t, planPool(planSpotPool, "spot", "spot", "1000", true))
	waitServed(ctx, t, ns, planStrategy)

	// A workload uses part of the spot pool: 1 pod on-demand, 3 on spot.
	filler := deployment(ns, "filler", "e2eplan=od,base=1:e2eplan=spot", 4, true)
	filler.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}
	createDeployment(ctx, t, filler)
	settled(ctx, t, ns, "filler", 4)
	used := poolCPUUsed(ctx, t, planSpotPool)
	// Room for exactly 5 more pods of 500m under the limit.
	limit := used.DeepCopy()
	limit.Add(resource.MustParse("2500m"))
	setPoolCPULimit(ctx, t, planSpotPool, limit)

	args := []string{"plan", "--cluster", "--replicas", "40", "--requests", "cpu=500m", "--strategy", planStrategy, "-n", ns}
	wantShort := firstShort(t, planStrategy, 1, 5, 40)
	var stdout, stderr string
	var code int
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		stdout, stderr, code = cli(ctx, t, nil, args...)
		return code == 4, nil
	})
	if err != nil {
		t.Fatalf("plan --cluster --replicas 40 with room for 5 spot pods: exit %d, want 4 (a term runs short: in fallback)\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{
		fmt.Sprintf("term 2 (e2eplan=spot) runs short at %d replicas", wantShort),
		"NodePool " + planSpotPool + " has room for 5 more pods",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if !strings.Contains(stdout, "plan does NOT fit") || !strings.Contains(stdout, "e2eplan-spot=true:NoSchedule") {
		t.Errorf("table lacks the verdict or the spot pool's toleration:\n%s", stdout)
	}
	t.Logf("plan --cluster --replicas 40 (exit %d):\n%s%s", code, stdout, stderr)

	out, _, code := cli(ctx, t, nil, append(args, "-o", "json")...)
	var r plan.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 4 {
		t.Fatalf("plan -o json: exit %d, %v\n%s", code, err, out)
	}
	spot := r.Terms[1]
	if r.Fits || spot.ShortAt != wantShort || spot.Room != 5 || len(spot.NodePools) != 1 || spot.NodePools[0].Name != planSpotPool || !r.Terms[0].Fits {
		t.Fatalf("json plan: fits %v, spot term %+v", r.Fits, spot)
	}

	// The live workload's pods count as placed, and the loop's record shows.
	manifest := filepath.Join(t.TempDir(), "filler.yaml")
	filler.APIVersion, filler.Kind = "apps/v1", "Deployment"
	if err := os.WriteFile(manifest, []byte(manifestOf(t, filler)), 0o644); err != nil {
		t.Fatal(err)
	}
	until := writeUnavailability(ctx, t, ns, "filler", 2)
	out, _, code = cli(ctx, t, nil, "plan", "--cluster", "-f", manifest, "--max-replicas", "8", "-o", "json")
	r = plan.Result{}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("plan -f: exit %d, %v\n%s", code, err, out)
	}
	if r.Replicas != 4 || r.Terms[0].Placed != 1 || r.Terms[1].Placed != 3 || r.Terms[1].UnavailableUntil != until.UTC().Format(time.RFC3339) {
		t.Fatalf("plan -f of the live filler: %+v", r)
	}
	// 3 placed + 5 of room: short once the filler's strategy wants a 9th spot pod.
	if want := firstShort(t, "e2eplan=od,base=1:e2eplan=spot", 1, 8, 8); r.Terms[1].ShortAt != want || (want == 0) != (code == 0) {
		t.Fatalf("plan -f: spot short at %d (exit %d), want %d", r.Terms[1].ShortAt, code, want)
	}

	// Raising the limit makes the same plan fit.
	limit.Add(resource.MustParse("100"))
	setPoolCPULimit(ctx, t, planSpotPool, limit)
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		stdout, stderr, code = cli(ctx, t, nil, args...)
		return code == 0, nil
	})
	if err != nil || !strings.Contains(stdout, "plan fits") {
		t.Fatalf("after raising the limit: exit %d, want 0\n%s%s", code, stdout, stderr)
	}
	t.Logf("after raising the limit (exit %d):\n%s", code, stdout)
}

func manifestOf(t *testing.T, obj any) string { return manifest(t, obj) }

// writeUnavailability records term (1-based) of the workload's current ReplicaSet
// unavailable for ten minutes, as the convergence loop writes it (unavailability.RecordName,
// the strategy package's record keys), and removes it at the end of the test.
func writeUnavailability(ctx context.Context, t *testing.T, ns, name string, term int) time.Time {
	t.Helper()
	rsList, err := env.client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil || len(rsList.Items) != 1 {
		t.Fatalf("ReplicaSets of %s: %v (%d)", name, err, len(rsList.Items))
	}
	uid := rsList.Items[0].UID
	until := time.Now().Add(10 * time.Minute).Truncate(time.Second)
	terms, err := json.Marshal(map[string]unavailability.TermState{fmt.Sprint(term): {Until: until, Since: time.Now(), Reason: "e2e: NodeClaim failed", Strikes: 1}})
	if err != nil {
		t.Fatal(err)
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Name: unavailability.RecordName(uid), Namespace: webhookNamespace,
		Labels:      map[string]string{strategy.LabelUnavailability: "true", strategy.LabelRevision: string(uid)},
		Annotations: map[string]string{strategy.AnnotationUnavailableTerms: string(terms), strategy.AnnotationWorkload: "Deployment " + ns + "/" + name},
	}}
	leases := env.client.CoordinationV1().Leases(webhookNamespace)
	if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatalf("writing the unavailability record: %v", err)
	}
	t.Cleanup(func() { _ = leases.Delete(context.Background(), lease.Name, metav1.DeleteOptions{}) })
	return until
}

func TestSpreadCostFromLocalAWS(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "e2e-cost")
	applyNodePool(ctx, t, planPool("e2e-cost-od", "costod", "on-demand", "", false))
	applyNodePool(ctx, t, planPool("e2e-cost-spot", "costspot", "spot", "", false))
	const strat = "e2eplan=costod,base=1:e2eplan=costspot"
	waitServed(ctx, t, ns, strat)
	d := deployment(ns, "priced", strat, 4, true)
	d.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	createDeployment(ctx, t, d)
	settled(ctx, t, ns, "priced", 4)

	const onDemand, spotPrice = 0.2, 0.06
	fake := awsfake.New(awsfake.Prices{
		OnDemand: map[string]map[string]float64{awsfake.Anywhere: {planInstanceType: onDemand}},
		Spot:     map[string]map[string]float64{awsfake.Anywhere: {planInstanceType: spotPrice}},
	})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	awsEnv := []string{"AWS_ENDPOINT_URL=" + srv.URL, "AWS_ACCESS_KEY_ID=AKIDE2E", "AWS_SECRET_ACCESS_KEY=secret", "AWS_REGION=us-east-1",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_EC2_METADATA_DISABLED=true"}
	args := []string{"spread", "-n", ns, "deployment/priced", "--cost", "--no-price-cache"}
	out, stderr, code := cli(ctx, t, awsEnv, append(args, "-o", "json")...)
	var r report.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 || len(r.Workloads) != 1 {
		t.Fatalf("spread --cost -o json: exit %d, %v\n%s%s", code, err, out, stderr)
	}
	if fake.Calls("GetProducts") == 0 || fake.Calls("DescribeSpotPriceHistory") == 0 {
		t.Fatalf("the CLI never asked the local AWS endpoint (GetProducts %d, DescribeSpotPriceHistory %d)", fake.Calls("GetProducts"), fake.Calls("DescribeSpotPriceHistory"))
	}
	w := r.Workloads[0]
	near := func(a, b float64) bool { return math.Abs(a-b) < 2e-4 }
	for i, price := range []float64{onDemand, spotPrice} {
		term := w.Terms[i]
		share := 0.0
		for _, n := range term.Nodes {
			share += n.Share
		}
		if term.Cost == nil || share <= 0 || !near(term.Cost.USDPerHour, price*share) || !near(term.Cost.OnDemandUSDPerHour, onDemand*share) || len(term.Cost.Unpriced) != 0 {
			t.Fatalf("term %d: cost %+v for a share of %.4f at $%v/h", i+1, term.Cost, share, price)
		}
	}
	if w.Cost == nil || w.Cost.SavingUSDPerHour <= 0 || w.Cost.SavingPercent <= 0 {
		t.Fatalf("workload cost %+v, want a saving", w.Cost)
	}
	table, _, code := cli(ctx, t, awsEnv, args...)
	if code != 0 || !strings.Contains(table, "COST/H") || !strings.Contains(table, "total") {
		t.Fatalf("spread --cost table (exit %d):\n%s", code, table)
	}
	t.Logf("spread --cost:\n%s", table)

	// AWS unreachable: the report still comes, every node named as not priced.
	down := httptest.NewServer(fake)
	down.Close()
	unreachable := append(append([]string{}, awsEnv...), "AWS_ENDPOINT_URL="+down.URL)
	// It must not hang: killed after two minutes (a bound for a hang, not for speed: the
	// machine may be loaded), the command fails the test.
	hang, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	table, stderr, code = cli(hang, t, unreachable, append(args, "--aws-timeout", "3s")...)
	if code != 0 || !strings.Contains(table, "not priced") || !strings.Contains(table, "spread exact") {
		t.Fatalf("with AWS unreachable: exit %d (context: %v)\n%s%s", code, hang.Err(), table, stderr)
	}
}

// A user who may read one namespace cannot list NodePools: the plan says so and what
// to do, and does not hang.
func TestPlanClusterNamespaceScopedUser(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(ctx, t, "e2e-plan-reader")
	if _, err := env.client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reader"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"", "apps"}, Resources: []string{"pods", "deployments", "replicasets"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "reader", Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(env.hc.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":reader"}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := strategy.Parse(planStrategy)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, _, err = plan.Collect(ctx, client, dyn, s, plan.Options{WebhookNamespace: webhookNamespace})
	if err == nil || !strings.Contains(err.Error(), "not allowed to list NodePools") || !strings.Contains(err.Error(), "without them run plan without --cluster") {
		t.Fatalf("Collect as a user of one namespace: %v", err)
	}
}

// Node groups come from the EKS API (a local endpoint speaking its REST-JSON protocol,
// reached by the CLI's SDK client): the spot group is at its max size, so the spot term
// runs short at its first seat; the on-demand group has free nodes of a size unknown
// without a node to measure.
func TestPlanClusterEKSNodeGroups(t *testing.T) {
	ctx := context.Background()
	group := func(name, capacity string, maxSize, desired int, taints ...map[string]string) map[string]any {
		g := map[string]any{
			"nodegroupName": name, "clusterName": "e2e-eks", "status": "ACTIVE", "capacityType": capacity,
			"amiType": "AL2023_x86_64_STANDARD", "instanceTypes": []string{"m5.xlarge"},
			"scalingConfig": map[string]int{"minSize": 0, "maxSize": maxSize, "desiredSize": desired},
		}
		if len(taints) > 0 {
			g["taints"] = taints
		}
		return g
	}
	eks := awsfake.NewEKS("e2e-eks",
		group("e2e-od", "ON_DEMAND", 3, 1),
		group("e2e-spot", "SPOT", 4, 4, map[string]string{"key": "spot", "value": "true", "effect": "NO_SCHEDULE"}))
	srv := httptest.NewServer(eks)
	t.Cleanup(srv.Close)
	awsEnv := []string{"AWS_ENDPOINT_URL=" + srv.URL, "AWS_ACCESS_KEY_ID=AKIDE2E", "AWS_SECRET_ACCESS_KEY=secret", "AWS_REGION=eu-west-1",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_EC2_METADATA_DISABLED=true"}
	const strat = "eks.amazonaws.com/capacityType=ON_DEMAND,base=1:eks.amazonaws.com/capacityType=SPOT"
	args := []string{"plan", "--cluster", "--eks-cluster-name", "e2e-eks", "--replicas", "5", "--requests", "cpu=500m", "--strategy", strat}
	out, stderr, code := cli(ctx, t, awsEnv, append(args, "-o", "json")...)
	var r plan.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 4 {
		t.Fatalf("plan with node groups: exit %d (want 4), %v\n%s%s", code, err, out, stderr)
	}
	od, spot := r.Terms[0], r.Terms[1]
	if len(od.NodeGroups) != 1 || od.NodeGroups[0].Name != "e2e-od" || od.NodeGroups[0].FreeNodes != 2 || !od.RoomUnknown || !od.Fits {
		t.Fatalf("on-demand term %+v: want e2e-od with 2 free nodes, room unknown", od)
	}
	if want := firstShort(t, strat, 1, 0, 5); spot.ShortAt != want || len(spot.NodeGroups) != 1 || spot.NodeGroups[0].FreeNodes != 0 ||
		len(spot.Tolerations) != 1 || spot.Tolerations[0].Key != "spot" {
		t.Fatalf("spot term %+v: want short at %d on e2e-spot at its max size, with its taint tolerated", spot, want)
	}
	if !strings.Contains(stderr, "node group e2e-spot has room for 0 more pods (0 free nodes)") {
		t.Fatalf("stderr does not name the node group:\n%s", stderr)
	}

	// EKS unreachable: the plan still comes, saying what it could not read.
	srv.Close()
	out, _, code = cli(ctx, t, awsEnv, args...)
	if code != 4 || !strings.Contains(out, "EKS managed node groups (") {
		t.Fatalf("with EKS unreachable: exit %d\n%s", code, out)
	}
}
