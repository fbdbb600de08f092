package karpenter

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// claim makes a NodeClaim created age ago for capacity type ct, with conditions
// (type=status pairs, all changed at creation).
func claim(name, ct string, age time.Duration, now time.Time, conds ...string) *karpv1.NodeClaim {
	created := metav1.NewTime(now.Add(-age))
	nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: created,
		Labels: map[string]string{karpv1.NodePoolLabelKey: "pool"}}}
	nc.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{
		{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{ct}},
		{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64", "arm64"}},
	}
	for _, c := range conds {
		typ, st, _ := strings.Cut(c, "=")
		nc.Status.Conditions = append(nc.Status.Conditions, status.Condition{Type: typ, Status: metav1.ConditionStatus(st),
			Reason: "Test", LastTransitionTime: created})
	}
	return nc
}

func TestClaimCarries(t *testing.T) {
	nc := claim("a", "spot", time.Minute, time.Now())
	for _, tc := range []struct {
		labels map[string]string
		want   bool
	}{
		{map[string]string{karpv1.CapacityTypeLabelKey: "spot"}, true},
		{map[string]string{karpv1.CapacityTypeLabelKey: "on-demand"}, false},
		{map[string]string{karpv1.CapacityTypeLabelKey: "spot", corev1.LabelArchStable: "arm64"}, true},
		{map[string]string{karpv1.NodePoolLabelKey: "pool"}, true},
		{map[string]string{karpv1.NodePoolLabelKey: "other"}, false},
		{map[string]string{"nodesize": "big"}, false}, // the claim says nothing of it
	} {
		if got := claimCarries(nc, tc.labels); got != tc.want {
			t.Errorf("claimCarries(%v) = %v, want %v", tc.labels, got, tc.want)
		}
	}
}

func TestFlight(t *testing.T) {
	now := time.Now()
	var f Flight
	for _, nc := range []*karpv1.NodeClaim{
		claim("young", "spot", 30*time.Second, now),
		claim("launched", "spot", 2*time.Minute, now, "Launched=True", "Registered=Unknown"),
		claim("up", "spot", 5*time.Minute, now, "Launched=True", "Registered=True", "Initialized=True"),
		claim("ice", "spot", time.Minute, now, "Launched=False"),
		claim("lost", "spot", 20*time.Minute, now, "Launched=True"),
		// As Karpenter v1 leaves a claim whose launch failed: Unknown, with a reason.
		claim("failing", "spot", 10*time.Second, now, "Launched=Unknown"),
	} {
		addClaim(&f, nc, now)
	}
	if f.Launching != 2 || f.Registered != 1 || len(f.Failed) != 3 {
		t.Fatalf("Flight = %+v, want 2 launching (young, launched), 1 registered, 3 failed (ice, lost, failing)", f)
	}
	if got := f.NotLaunched["pool"]; len(got) != 2 || !strings.Contains(got[0], "nodeclaim/ice not launched (Launched=False, Test") ||
		!strings.Contains(got[1], "nodeclaim/failing not launched (Launched=Unknown, Test") {
		t.Errorf("NotLaunched = %q, want ice and failing, by their NodePool", f.NotLaunched)
	}
	// A claim not tried yet (Launched Unknown, AwaitingReconciliation) is launching.
	var fresh Flight
	nc := claim("fresh", "spot", time.Second, now, "Launched=Unknown")
	nc.Status.Conditions[0].Reason = awaitingReconciliation
	addClaim(&fresh, nc, now)
	if fresh.Launching != 1 || len(fresh.Failed) != 0 {
		t.Errorf("a claim awaiting reconciliation: %+v, want launching", fresh)
	}
	if want := now.Add(-30 * time.Second); !f.LastProgress.Equal(want.Truncate(time.Second)) && !f.LastProgress.Equal(want) {
		t.Errorf("LastProgress %s, want the youngest claim's creation %s", f.LastProgress, want)
	}
	if !f.Progressing(now, time.Minute) {
		t.Error("claims launching: progressing")
	}
	idle := Flight{Registered: 3, LastProgress: now.Add(-5 * time.Minute)}
	if idle.Progressing(now, time.Minute) {
		t.Error("nothing launching and no progress for 5m, window 1m: not progressing")
	}
	if !idle.Progressing(now, 10*time.Minute) {
		t.Error("progress 5m ago, window 10m: progressing")
	}
	if (Flight{}).Progressing(now, time.Minute) {
		t.Error("no claim at all: not progressing")
	}
}

// RegistrationTimeout copies an unexported constant of the Karpenter version in go.mod:
// read it there, so a Karpenter upgrade that changes it fails here.
func TestRegistrationTimeoutIsKarpenters(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/karpenter").Output()
	if err != nil {
		t.Fatalf("go list -m sigs.k8s.io/karpenter: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "pkg", "controllers", "nodeclaim", "lifecycle", "liveness.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`registrationTimeout\s*=\s*time\.Minute\s*\*\s*(\d+)`).FindSubmatch(src)
	if m == nil {
		t.Fatal("registrationTimeout not found in Karpenter's liveness.go: see how it decides a launch failed")
	}
	if got := string(m[1]) + "m0s"; got != RegistrationTimeout.String() {
		t.Errorf("Karpenter's registrationTimeout is %s, RegistrationTimeout %s", got, RegistrationTimeout)
	}
}
