package plan

import (
	"fmt"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// whatIfState is namespace shop, whose default "capacity=on-demand,base=1:capacity=spot"
// placed Deployment web's 3 pods (seat 1 on-demand, seats 2 and 3 spot), and Deployment
// api (app=api, 2 pods) that no strategy placed.
func whatIfState(t *testing.T) *report.State {
	t.Helper()
	ref := func(kind, name, uid string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID(uid), Controller: ptr.To(true)}}
	}
	st := &report.State{Nodes: map[string]*corev1.Node{}}
	for _, app := range []struct {
		name     string
		replicas int32
		seats    map[int]string
	}{{"web", 3, map[int]string{1: "on-demand", 2: "spot", 3: "spot"}}, {"api", 2, map[int]string{0: "", -1: ""}}} {
		lbl := map[string]string{"app": app.name}
		st.Deployments = append(st.Deployments, appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: app.name, Namespace: "shop", UID: types.UID(app.name), Labels: lbl},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(app.replicas), Selector: &metav1.LabelSelector{MatchLabels: lbl}}})
		st.ReplicaSets = append(st.ReplicaSets, appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: app.name + "-1", Namespace: "shop", UID: types.UID(app.name + "-rs"), Labels: lbl,
			Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"}, OwnerReferences: ref("Deployment", app.name, app.name)}})
		for seat, capacity := range app.seats {
			pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: app.name + "-" + strconv.Itoa(seat), Namespace: "shop", Labels: lbl, OwnerReferences: ref("ReplicaSet", app.name+"-1", app.name+"-rs")},
				Spec: corev1.PodSpec{NodeName: "n"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
			if seat > 0 { // placed: its seat and its term's label
				pod.Annotations = map[string]string{strategy.AnnotationSeat: strconv.Itoa(seat)}
				pod.Spec.NodeSelector = map[string]string{"capacity": capacity}
			}
			st.Pods = append(st.Pods, pod)
		}
	}
	return st
}

var shop = corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Annotations: map[string]string{strategy.AnnotationStrategy: "capacity=on-demand,base=1:capacity=spot"}}}

const spotFirst = `apiVersion: custom-kube-scheduler-webhook.io/v1alpha1
kind: PlacementPolicy
metadata: {name: spot-first, namespace: shop}
spec:
  strategy: capacity=spot,base=2:capacity=on-demand
  selector: {matchLabels: {app: web}}
`

// whatIf builds the report of st with live policies and the edit in manifest.
func whatIf(t *testing.T, st *report.State, live *policy.Index, manifest string) ([]WhatIfRow, int, Edit) {
	t.Helper()
	e, ok, err := ReadEdit([]byte(manifest), "default")
	if err != nil || !ok {
		t.Fatalf("ReadEdit: %v, found %v", err, ok)
	}
	st.Policies, st.WhatIf = live, e.Apply(live)
	rows, moves := WhatIfRows(report.Build(st, func(string, string) bool { return true }), e.Object)
	return rows, moves, e
}

// A new policy over a workload its namespace default placed: the row names both sources
// and targets, and its moves are the count the same policy in audit mode reports.
func TestWhatIfNewPolicyCountsWhatAuditCounts(t *testing.T) {
	live := policy.NewIndex(nil, nil, []corev1.Namespace{shop})
	rows, moves, _ := whatIf(t, whatIfState(t), live, spotFirst)
	if len(rows) != 1 {
		t.Fatalf("rows %+v, want web only (api is not selected and keeps the namespace default)", rows)
	}
	r := rows[0]
	if r.Name != "web" || r.Before.Source != "Namespace shop" || r.After.Source != "PlacementPolicy shop/spot-first" {
		t.Fatalf("row %+v", r)
	}
	if fmt.Sprint(r.Before.Target) != "[1 2]" || fmt.Sprint(r.After.Target) != "[2 1]" {
		t.Fatalf("targets before %v after %v, want [1 2] and [2 1]", r.Before.Target, r.After.Target)
	}
	// Seat 1 (on-demand) moves to spot, seat 3 (spot) to on-demand; seat 2 stays on spot.
	if r.Moves != 2 || moves != 2 || fmt.Sprint(r.Pods) != "[web-1 web-3]" {
		t.Fatalf("moves %d (total %d) of pods %v, want 2: web-1 and web-3", r.Moves, moves, r.Pods)
	}
	// The same policy applied in audit mode: its audit count is the what-if's.
	e, _, _ := ReadEdit([]byte(spotFirst+"  mode: Audit\n"), "")
	if !e.Audit {
		t.Fatal("mode: Audit not read")
	}
	st := whatIfState(t)
	st.Policies = e.Apply(live)
	rep := report.Build(st, func(string, string) bool { return true })
	if len(rep.Workloads) != 2 || rep.Workloads[1].Name != "web" || rep.Workloads[1].Audit == nil || rep.Workloads[1].Audit.WouldMove != r.Moves {
		t.Fatalf("audit report %+v, want web's wouldMove %d", rep.Workloads, r.Moves)
	}
}

// Editing the live policy so that it selects api too: web keeps its strategy (listed,
// no move), api goes from its namespace default to the policy with every pod unplaced
// (2 moves); the edited policy in audit mode releases web back to the default.
func TestWhatIfEditedPolicy(t *testing.T) {
	var p v1alpha1.PlacementPolicy
	p.Namespace, p.Name = "shop", "spot-first"
	p.Spec.Strategy, p.Spec.Selector = "capacity=on-demand,base=1:capacity=spot", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	live := policy.NewIndex([]v1alpha1.PlacementPolicy{p}, nil, []corev1.Namespace{shop})
	edited := `apiVersion: custom-kube-scheduler-webhook.io/v1alpha1
kind: PlacementPolicy
metadata: {name: spot-first, namespace: shop}
spec:
  strategy: capacity=on-demand,base=1:capacity=spot
  selector: {matchExpressions: [{key: app, operator: In, values: [web, api]}]}
`
	rows, moves, _ := whatIf(t, whatIfState(t), live, edited)
	if len(rows) != 2 || moves != 2 {
		t.Fatalf("rows %+v moves %d, want api and web, 2 moves", rows, moves)
	}
	api, web := rows[0], rows[1]
	if api.Before.Source != "Namespace shop" || api.After.Source != "PlacementPolicy shop/spot-first" || api.Moves != 2 || fmt.Sprint(api.Pods) != "[api--1 api-0]" {
		t.Fatalf("api %+v", api)
	}
	if web.Before.Source != web.After.Source || web.Moves != 0 {
		t.Fatalf("web %+v, want unchanged", web)
	}
	rows, moves, e := whatIf(t, whatIfState(t), live, edited+"  mode: Audit\n")
	if !e.Audit || moves != 0 || len(rows) != 1 || rows[0].After.Source != "Namespace shop" {
		t.Fatalf("audit version: rows %+v moves %d", rows, moves)
	}
}

// An edited Namespace default: every workload it places is listed with its moves.
func TestWhatIfNamespaceDefault(t *testing.T) {
	live := policy.NewIndex(nil, nil, []corev1.Namespace{shop})
	edited := `apiVersion: v1
kind: Namespace
metadata:
  name: shop
  annotations: {CustomPodScheduleStrategy: "capacity=on-demand,base=2:capacity=spot"}
`
	rows, moves, e := whatIf(t, whatIfState(t), live, edited)
	if e.Object != "Namespace shop" || len(rows) != 2 {
		t.Fatalf("%s: rows %+v", e.Object, rows)
	}
	// api: 2 unplaced pods move; web: seat 2 moves from spot to on-demand.
	if rows[0].Moves != 2 || rows[1].Moves != 1 || moves != 3 {
		t.Fatalf("rows %+v moves %d, want 2+1", rows, moves)
	}
}

// What the API server refuses at apply is refused here too; a workload manifest is not
// an edit.
func TestReadEditRefusesInvalidPolicies(t *testing.T) {
	for _, bad := range []string{
		"apiVersion: custom-kube-scheduler-webhook.io/v1alpha1\nkind: ClusterPlacementPolicy\nmetadata: {name: x}\nspec: {strategy: 'capacity=spot,weight=x', selector: {}}\n",
		"apiVersion: custom-kube-scheduler-webhook.io/v1alpha1\nkind: PlacementPolicy\nmetadata: {name: x}\nspec: {strategy: capacity=spot, selector: {matchExpressions: [{key: a, operator: Bogus}]}}\n",
		spotFirst + "---\n" + spotFirst,
	} {
		if _, _, err := ReadEdit([]byte(bad), "default"); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	if _, ok, err := ReadEdit([]byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n"), "default"); ok || err != nil {
		t.Fatalf("a Deployment read as an edit: %v %v", ok, err)
	}
}
