package karpenter

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
)

// limited returns a NodePool name with limits and used resources, and conditions as
// type=status[:reason] strings.
func limited(name string, limits, used corev1.ResourceList, conds ...string) *karpv1.NodePool {
	np := limitedPool(limits, used)
	np.Name = name
	for _, c := range conds {
		typ, rest, _ := strings.Cut(c, "=")
		st, reason, _ := strings.Cut(rest, ":")
		np.Status.Conditions = append(np.Status.Conditions, status.Condition{Type: typ, Status: metav1.ConditionStatus(st), Reason: reason})
	}
	return np
}

func TestCannotLaunch(t *testing.T) {
	req := rl("cpu", "1", "memory", "1Gi", "pods", "1")
	full := limited("spot", rl("cpu", "16"), rl("cpu", "16"))
	fullToo := limited("spot-big", rl("cpu", "32"), rl("cpu", "32"))
	half := limited("spot-half", rl("cpu", "16"), rl("cpu", "15500m"))
	roomy := limited("roomy", rl("cpu", "100"), rl("cpu", "4"))
	nolimits := limited("free", nil, rl("cpu", "400"))
	podsFull := limited("pods", rl("pods", "10"), rl("pods", "10"))
	nodesFull := limited("nodes", rl("nodes", "3"), rl("nodes", "3"))
	memFull := limited("mem", rl("memory", "64Gi"), rl("memory", "64Gi"))
	notReady := limited("broken", nil, nil, "Ready=False:NodeClassNotReady")
	unhealthy := limited("unhealthy", nil, nil, "NodeRegistrationHealthy=False:RegistrationFailed")
	healthy := limited("healthy", nil, nil, "NodeRegistrationHealthy=True:Registered", "Ready=True:Ready")
	// Karpenter v1.0 and v1.1 (v1.0.8, v1.1.5 checked; v1.5.5 has it) set no
	// NodeRegistrationHealthy: that block never fires there, and the pool is judged by
	// the other signals.
	v10 := limited("v10", nil, nil, "ValidationSucceeded=True:ValidationSucceeded", "NodeClassReady=True:NodeClassReady", "Ready=True:Ready")
	going := limited("going", nil, nil)
	going.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	watching := func(pools ...*karpv1.NodePool) LaunchView { return LaunchView{Watching: true, Pools: pools} }
	failing := Flight{NotLaunched: map[string][]string{"roomy": {"nodeclaim/roomy-x not launched (Launched=Unknown, LaunchFailed: quota exceeded)"}}}

	for _, tc := range []struct {
		name  string
		view  LaunchView
		req   corev1.ResourceList
		f     Flight
		kinds []string
		want  string
	}{
		{"not watching", LaunchView{Pools: []*karpv1.NodePool{full}}, req, Flight{}, nil, ""},
		{"limits exhausted", watching(full), req, Flight{}, []string{BlockedLimits}, "NodePool spot limits exhausted (cpu: 0 left)"},
		{"two pools, the same block", watching(full, fullToo), req, Flight{}, []string{BlockedLimits}, "NodePools spot, spot-big limits exhausted (cpu: 0 left)"},
		{"less left than the pod requests", watching(half), req, Flight{}, []string{BlockedLimits}, "NodePool spot-half limits exhausted (cpu: 500m left, the pod requests 1)"},
		{"one pool has room", watching(full, roomy), req, Flight{}, nil, ""},
		{"a pool without limits", watching(full, nolimits), req, Flight{}, nil, ""},
		{"pods limit", watching(podsFull), req, Flight{}, []string{BlockedLimits}, "NodePool pods limits exhausted (pods: 0 left)"},
		{"nodes limit", watching(nodesFull), req, Flight{}, []string{BlockedLimits}, "NodePool nodes limits exhausted (nodes: 0 left)"},
		// A new node has some CPU and memory: none left blocks a pod that requests none.
		{"cpu used up, the pod requests none", watching(full), nil, Flight{}, []string{BlockedLimits}, "NodePool spot limits exhausted (cpu: 0 left)"},
		{"memory used up, the pod requests cpu only", watching(memFull), rl("cpu", "1"), Flight{}, []string{BlockedLimits}, "NodePool mem limits exhausted (memory: 0 left)"},
		{"something launching for the term", watching(full), req, Flight{Launching: 1}, nil, ""},
		{"a node group serves it too", LaunchView{Watching: true, Pools: []*karpv1.NodePool{full}, NodeGroups: 1}, req, Flight{}, nil, ""},
		{"other nodes do not lift limits", LaunchView{Watching: true, Pools: []*karpv1.NodePool{full}, Nodes: 2}, req, Flight{}, []string{BlockedLimits}, "NodePool spot limits exhausted (cpu: 0 left)"},
		{"not Ready", watching(notReady), req, Flight{}, []string{BlockedNotReady}, "NodePool broken not Ready (NodeClassNotReady)"},
		{"being deleted", watching(going), req, Flight{}, []string{BlockedNotReady}, "NodePool going being deleted"},
		{"registration unhealthy", watching(unhealthy), req, Flight{}, []string{BlockedRegistration}, "NodePool unhealthy cannot register nodes (NodeRegistrationHealthy=False, RegistrationFailed)"},
		{"registration healthy", watching(healthy), req, Flight{}, nil, ""},
		{"no registration condition (Karpenter v1.0, v1.1)", watching(v10), req, Flight{}, nil, ""},
		{"claims fail to launch", watching(roomy), req, failing, []string{BlockedLaunch},
			"NodePool roomy cannot launch (nodeclaim/roomy-x not launched (Launched=Unknown, LaunchFailed: quota exceeded))"},
		{"claims of another pool fail", watching(roomy), req, Flight{NotLaunched: map[string][]string{"other": {"x"}}}, nil, ""},
		{"every pool blocked, each its way", watching(full, roomy, unhealthy), req, failing, []string{BlockedLaunch, BlockedLimits, BlockedRegistration},
			"NodePool spot limits exhausted (cpu: 0 left); NodePool roomy cannot launch (nodeclaim/roomy-x not launched (Launched=Unknown, LaunchFailed: quota exceeded)); NodePool unhealthy cannot register nodes (NodeRegistrationHealthy=False, RegistrationFailed)"},
		{"no NodePool serves the term", LaunchView{Watching: true, Incompatible: `nodepool "spot": label "nodesize" does not have known values`}, req, Flight{}, []string{BlockedNoNodePool},
			`no NodePool is compatible with the term (nodepool "spot": label "nodesize" does not have known values)`},
		{"no NodePool, but nodes serve it", LaunchView{Watching: true, Nodes: 1}, req, Flight{}, nil, ""},
		{"no NodePool, but a node group serves it", LaunchView{Watching: true, NodeGroups: 1}, req, Flight{}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CannotLaunch(tc.view, tc.req, tc.f)
			if got.Message != tc.want || !reflect.DeepEqual(got.Kinds, tc.kinds) {
				t.Errorf("CannotLaunch = %q %v\nwant %q %v", got.Message, got.Kinds, tc.want, tc.kinds)
			}
			if got.Blocked() != (tc.want != "") {
				t.Errorf("Blocked() = %v", got.Blocked())
			}
		})
	}
}

func TestLaunchView(t *testing.T) {
	m := NewMatcher()
	spot := pool("spot", nil, req(capType, corev1.NodeSelectorOpIn, "spot"))
	broken := pool("broken", nil, req(capType, corev1.NodeSelectorOpIn, "spot"))
	broken.Status.Conditions = []status.Condition{{Type: "Ready", Status: metav1.ConditionFalse}}
	sized := pool("sized", map[string]string{"nodesize": "spot4"}, req(capType, corev1.NodeSelectorOpIn, "spot"))
	od := pool("od", nil, req(capType, corev1.NodeSelectorOpIn, "on-demand"))
	pools := []*karpv1.NodePool{spot, broken, sized, od}
	groups := []nodegroups.Group{
		{Name: "g-spot", Status: "ACTIVE", Labels: map[string]string{"nodesize": "static", nodegroups.LabelNodeGroup: "g-spot"}},
	}
	nodes := []*corev1.Node{
		node("n-karpenter", true, map[string]string{capType: "spot", karpv1.NodePoolLabelKey: "spot"}),
		node("n-static", true, map[string]string{"nodesize": "static"}),
		node("n-group", true, map[string]string{"nodesize": "static", nodegroups.LabelNodeGroup: "g-spot"}),
		node("n-other", true, map[string]string{"nodesize": "other"}),
		node("n-down", false, map[string]string{"nodesize": "other"}),
	}
	poolNames := func(v LaunchView) []string {
		out := []string{}
		for _, np := range v.Pools {
			out = append(out, np.Name)
		}
		return out
	}
	for _, tc := range []struct {
		term          map[string]string
		pools         []string
		groups, nodes int
		incompatible  bool
	}{
		{term(capType, "spot"), []string{"broken", "sized", "spot"}, 0, 0, false},
		{term("nodesize", "spot4"), []string{"sized"}, 0, 0, false},
		{term("nodesize", "static"), []string{}, 1, 1, true},
		{term("nodesize", "other"), []string{}, 0, 1, true},
		{term("nodesize", "typo"), []string{}, 0, 0, true},
	} {
		v := launchView(m, pools, groups, nodes, tc.term)
		if got := poolNames(v); !v.Watching || !reflect.DeepEqual(got, tc.pools) || v.NodeGroups != tc.groups || v.Nodes != tc.nodes || (v.Incompatible != "") != tc.incompatible {
			t.Errorf("launchView(%v) = pools %v, %d groups, %d nodes, incompatible %q; want %v, %d, %d, incompatible %v",
				tc.term, got, v.NodeGroups, v.Nodes, v.Incompatible, tc.pools, tc.groups, tc.nodes, tc.incompatible)
		}
	}
}

func TestLaunchFailed(t *testing.T) {
	for _, tc := range []struct {
		c    status.Condition
		want bool
	}{
		{status.Condition{Type: karpv1.ConditionTypeLaunched, Status: metav1.ConditionTrue, Reason: "Launched"}, false},
		{status.Condition{Type: karpv1.ConditionTypeLaunched, Status: metav1.ConditionUnknown, Reason: "AwaitingReconciliation"}, false},
		{status.Condition{Type: karpv1.ConditionTypeLaunched, Status: metav1.ConditionUnknown}, false},
		{status.Condition{Type: karpv1.ConditionTypeLaunched, Status: metav1.ConditionUnknown, Reason: "LaunchFailed", Message: "quota"}, true},
		{status.Condition{Type: karpv1.ConditionTypeLaunched, Status: metav1.ConditionUnknown, Reason: "InsufficientFreeAddressesInSubnet"}, true},
		{status.Condition{Type: karpv1.ConditionTypeLaunched, Status: metav1.ConditionFalse, Reason: "X"}, true},
	} {
		if got := launchFailed(tc.c); got != tc.want {
			t.Errorf("launchFailed(%s=%s %s) = %v, want %v", tc.c.Type, tc.c.Status, tc.c.Reason, got, tc.want)
		}
	}
}

// launchFailed reads the Launched condition as Karpenter writes it on a failed launch
// (Unknown, with the cloud provider's reason or "LaunchFailed"), and an untried one as
// operatorpkg initialises it (Unknown, AwaitingReconciliation): find both in the source
// of the versions in go.mod, so an upgrade that changes them fails here.
func TestLaunchedConditionIsKarpenters(t *testing.T) {
	for _, tc := range []struct{ module, file, want string }{
		{"sigs.k8s.io/karpenter", "pkg/controllers/nodeclaim/lifecycle/launch.go", `SetUnknownWithReason(v1.ConditionTypeLaunched, "LaunchFailed"`},
		{"sigs.k8s.io/karpenter", "pkg/controllers/nodeclaim/lifecycle/launch.go", `SetUnknownWithReason(v1.ConditionTypeLaunched, createError.ConditionReason`},
		{"sigs.k8s.io/karpenter", "pkg/controllers/nodeclaim/lifecycle/liveness.go", `SetFalse(v1.ConditionTypeNodeRegistrationHealthy`},
		{"github.com/awslabs/operatorpkg", "status/condition_set.go", `SetUnknownWithReason(conditionType, "` + awaitingReconciliation + `"`},
	} {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", tc.module).Output()
		if err != nil {
			t.Fatalf("go list -m %s: %v", tc.module, err)
		}
		src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), tc.file))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(src), tc.want) {
			t.Errorf("%s %s no longer says %q: see how Karpenter reports a failed launch", tc.module, tc.file, tc.want)
		}
	}
}
