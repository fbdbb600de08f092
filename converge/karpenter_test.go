package converge

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
)

func karpenterEvent(component, msg string, at time.Time) corev1.Event {
	return corev1.Event{Source: corev1.EventSource{Component: component}, Message: msg, LastTimestamp: metav1.NewTime(at)}
}

func TestEventWords(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name   string
		events []corev1.Event
		want   string
		kinds  []string
	}{
		{"limits, past an incompatible pool and the scheduler's own event", []corev1.Event{
			karpenterEvent("default-scheduler", "0/3 nodes are available: exceed limits for nodepool", now),
			karpenterEvent("karpenter", "Failed to schedule pod, incompatible requirements, key karpenter.sh/capacity-type; all available instance types exceed limits for nodepool (NodePool=spot)", now),
		}, "all available instance types exceed limits for nodepool (NodePool=spot)", []string{karpenter.BlockedLimits}},
		{"a Nominated message is no unlaunchable word", []corev1.Event{
			karpenterEvent("karpenter", "Pod should schedule on: nodeclaim/x", now),
		}, "", nil},
		// As Karpenter v1.14 says it for a label no NodePool can set.
		{"every pool incompatible", []corev1.Event{
			karpenterEvent("karpenter", `Failed to schedule pod, incompatible requirements, label "nodesize" does not have known values; incompatible requirements, key nodesize, nodesize In [typo] not in nodesize In [spot8vcpu32gb]; `, now),
		}, `no NodePool is compatible (incompatible requirements, label "nodesize" does not have known values)`, []string{karpenter.BlockedNoNodePool}},
		// The latest word counts: a pool that could not launch before may have room now.
		{"the latest event says nothing", []corev1.Event{
			karpenterEvent("karpenter", "Failed to schedule pod, all available instance types exceed limits for nodepool (NodePool=spot)", now.Add(-time.Minute)),
			karpenterEvent("karpenter", "Failed to schedule pod, incompatible requirements, key a; something else entirely", now),
		}, "", nil},
		{"limits and capacity", []corev1.Event{
			karpenterEvent("karpenter", "Failed to schedule pod, node limits have been exhausted for nodepool (NodePool=a); insufficient capacity for nodepool b", now),
		}, "node limits have been exhausted for nodepool (NodePool=a); insufficient capacity for nodepool b", []string{karpenter.BlockedLimits, karpenter.BlockedLaunch}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, kinds := eventWords(tc.events)
			if got != tc.want || strings.Join(kinds, ",") != strings.Join(tc.kinds, ",") {
				t.Errorf("eventWords = %q %v, want %q %v", got, kinds, tc.want, tc.kinds)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	limits := karpenter.Verdict{Kinds: []string{karpenter.BlockedLimits}, Message: "NodePool spot limits exhausted (cpu: 0 left)"}
	for _, tc := range []struct {
		name    string
		verdict karpenter.Verdict
		words   string
		kinds   []string
		want    string
	}{
		{"neither", karpenter.Verdict{}, "", nil, ""},
		{"structured only", limits, "", nil, "Karpenter: NodePool spot limits exhausted (cpu: 0 left)"},
		{"the Event agrees", limits, "all available instance types exceed limits for nodepool (NodePool=spot)", []string{karpenter.BlockedLimits},
			"Karpenter: NodePool spot limits exhausted (cpu: 0 left) (its Event agrees: all available instance types exceed limits for nodepool (NodePool=spot))"},
		{"the Event says another thing", limits, "insufficient capacity", []string{karpenter.BlockedLaunch},
			"Karpenter: NodePool spot limits exhausted (cpu: 0 left) (its Event says: insufficient capacity)"},
		{"the Event only", karpenter.Verdict{}, "all available instance types exceed limits for nodepool (NodePool=spot)", []string{karpenter.BlockedLimits},
			"Karpenter's Event: all available instance types exceed limits for nodepool (NodePool=spot)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decide(tc.verdict, tc.words, tc.kinds); got != tc.want {
				t.Errorf("decide = %q, want %q", got, tc.want)
			}
		})
	}
}

type fakeViews struct{ view karpenter.LaunchView }

func (f fakeViews) LaunchView(map[string]string) karpenter.LaunchView { return f.view }

type flightOf struct{ flight karpenter.Flight }

func (f flightOf) Flight(map[string]string, time.Time) karpenter.Flight { return f.flight }

// Unlaunchable reads the pod's requests and Karpenter's objects first, its Events second,
// and says which decided.
func TestKarpenterSignalsUnlaunchable(t *testing.T) {
	spot := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "spot"}}
	spot.Spec.Limits = karpv1.Limits{corev1.ResourceCPU: resource.MustParse("10")}
	spot.Status.Resources = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10")}
	roomy := spot.DeepCopy()
	roomy.Status.Resources = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
	nearly := spot.DeepCopy()
	nearly.Status.Resources = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("9800m")}
	unhealthy := roomy.DeepCopy()
	unhealthy.Status.Conditions = []status.Condition{{Type: karpv1.ConditionTypeNodeRegistrationHealthy, Status: metav1.ConditionFalse, Reason: "RegistrationFailed", Message: "Failed to register node"}}
	limitWords := "Failed to schedule pod, all available instance types exceed limits for nodepool (NodePool=spot)"
	for _, tc := range []struct {
		name     string
		view     karpenter.LaunchView
		flight   karpenter.Flight
		event    string // Karpenter's FailedScheduling message on the pod, "" for none
		age      time.Duration
		want     string
		noViews  bool
		podGone  bool
		wantNone bool
	}{
		{name: "limits exhausted, no Event yet", view: karpenter.LaunchView{Watching: true, Pools: []*karpv1.NodePool{spot}},
			age: 20 * time.Second, want: "Karpenter: NodePool spot limits exhausted (cpu: 0 left)"},
		{name: "limits exhausted, and the Event agrees", view: karpenter.LaunchView{Watching: true, Pools: []*karpv1.NodePool{spot}}, event: limitWords,
			age: 20 * time.Second, want: "Karpenter: NodePool spot limits exhausted (cpu: 0 left) (its Event agrees: all available instance types exceed limits for nodepool (NodePool=spot))"},
		{name: "room under the limits: the Event decides", view: karpenter.LaunchView{Watching: true, Pools: []*karpv1.NodePool{roomy}}, event: limitWords,
			age: 20 * time.Second, want: "Karpenter's Event: all available instance types exceed limits for nodepool (NodePool=spot)"},
		{name: "room, and no Event", view: karpenter.LaunchView{Watching: true, Pools: []*karpv1.NodePool{roomy}},
			age: 20 * time.Second, wantNone: true},
		{name: "a claim launching: only the Event may say", view: karpenter.LaunchView{Watching: true, Pools: []*karpv1.NodePool{spot}},
			flight: karpenter.Flight{Launching: 1}, age: 20 * time.Second, wantNone: true},
		{name: "registration unhealthy", view: karpenter.LaunchView{Watching: true, Pools: []*karpv1.NodePool{unhealthy}},
			age: 20 * time.Second, want: "Karpenter: NodePool spot cannot register nodes (NodeRegistrationHealthy=False, RegistrationFailed: Failed to register node)"},
		{name: "claims fail to launch", view: karpenter.LaunchView{Watching: true, Pools: []*karpv1.NodePool{roomy}},
			flight: karpenter.Flight{NotLaunched: map[string][]string{"spot": {"nodeclaim/spot-a not launched (Launched=Unknown, LaunchFailed: quota)"}}},
			age:    20 * time.Second, want: "Karpenter: NodePool spot cannot launch (nodeclaim/spot-a not launched (Launched=Unknown, LaunchFailed: quota))"},
		{name: "Karpenter not watched: the Event only", view: karpenter.LaunchView{}, event: limitWords,
			age: 20 * time.Second, want: "Karpenter's Event: all available instance types exceed limits for nodepool (NodePool=spot)"},
		{name: "no views: the Event only", noViews: true, event: limitWords,
			age: 20 * time.Second, want: "Karpenter's Event: all available instance types exceed limits for nodepool (NodePool=spot)"},
		// Without the pod's requests, only limits used up entirely count.
		{name: "the pod cannot be read, limits used up", view: karpenter.LaunchView{Watching: true, Pools: []*karpv1.NodePool{spot}}, podGone: true,
			age: 20 * time.Second, want: "Karpenter: NodePool spot limits exhausted (cpu: 0 left)"},
		{name: "the pod cannot be read, less left than it requests", view: karpenter.LaunchView{Watching: true, Pools: []*karpv1.NodePool{nearly}}, podGone: true,
			age: 20 * time.Second, wantNone: true},
		{name: "less left than the pod requests", view: karpenter.LaunchView{Watching: true, Pools: []*karpv1.NodePool{nearly}},
			age: 20 * time.Second, want: "Karpenter: NodePool spot limits exhausted (cpu: 200m left, the pod requests 500m)"},
		{name: "Karpenter gets 10s first", view: karpenter.LaunchView{Watching: true, Pools: []*karpv1.NodePool{spot}},
			age: 5 * time.Second, wantNone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pod(2, 2, "spot", false, tc.age)
			p.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}}}
			client := fake.NewClientset()
			ctx := context.Background()
			if !tc.podGone {
				if _, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.event != "" {
				ev := karpenterEvent("karpenter", tc.event, time.Now())
				ev.ObjectMeta = metav1.ObjectMeta{Name: "e", Namespace: ns}
				ev.Reason = "FailedScheduling"
				ev.InvolvedObject = corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: p.Name, UID: p.UID}
				if _, err := client.CoreV1().Events(ns).Create(ctx, &ev, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			var views LaunchViews = fakeViews{tc.view}
			if tc.noViews {
				views = nil
			}
			k := NewKarpenterSignals(client, views, flightOf{tc.flight})
			got := k.Unlaunchable(ctx, map[string]string{"karpenter.sh/capacity-type": "spot"}, []clusterview.PlacedPod{clusterview.PlacedPodOf(p)})
			if tc.wantNone {
				tc.want = ""
			}
			if got != tc.want {
				t.Errorf("Unlaunchable = %q\nwant %q", got, tc.want)
			}
		})
	}
}

// A pod looked at is not looked at again within minAge: a pass every 2s must not list
// Events (or get the pod) each time.
func TestKarpenterSignalsLookOncePerMinAge(t *testing.T) {
	p := pod(2, 2, "spot", false, 30*time.Second)
	client := fake.NewClientset(p)
	spot := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "spot"}}
	spot.Spec.Limits = karpv1.Limits{corev1.ResourceCPU: resource.MustParse("0")}
	k := NewKarpenterSignals(client, fakeViews{karpenter.LaunchView{Watching: true, Pools: []*karpv1.NodePool{spot}}}, nil)
	ctx := context.Background()
	pending := []clusterview.PlacedPod{clusterview.PlacedPodOf(p)}
	if got := k.Unlaunchable(ctx, nil, pending); !strings.HasPrefix(got, "Karpenter: NodePool spot limits exhausted") {
		t.Fatalf("first look: %q", got)
	}
	calls := len(client.Actions())
	if got := k.Unlaunchable(ctx, nil, pending); got != "" || len(client.Actions()) != calls {
		t.Errorf("second look within minAge: %q, %d API calls, want none", got, len(client.Actions())-calls)
	}
}
