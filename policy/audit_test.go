package policy

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/api/v1alpha1"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// TestAudit: a policy in audit mode governs nothing (the next source in precedence
// applies: a lower policy, else the namespace default) but its status counts the
// workloads it would govern and the pods enforcing it would move; a namespace default in
// audit mode applies to nothing and is counted too.
func TestAudit(t *testing.T) {
	audit := pp("shop", "next", "a=2", 10, nil)
	audit.Spec.Mode = v1alpha1.ModeAudit
	lower := pp("shop", "now", "a=1", 0, map[string]string{"app": "web"})
	auditNS := namespace("batch", nil, "b=1")
	auditNS.Annotations = map[string]string{strategy.AnnotationStrategy: "b=1", v1alpha1.AnnotationMode: "audit"}
	idx := NewIndex([]v1alpha1.PlacementPolicy{audit, lower}, nil, []corev1.Namespace{namespace("shop", nil, "ns=1"), auditNS})

	resolve := func(w Workload, audit bool) string {
		links := idx.AppendLinks(nil, w)
		if audit {
			links = idx.AppendAuditLinks(nil, w)
		}
		return strategy.Resolve(links...).Object
	}
	web := Workload{Namespace: "shop", Kind: "Deployment", Labels: map[string]string{"app": "web"}}
	db := Workload{Namespace: "shop", Kind: "Deployment", Labels: map[string]string{"app": "db"}}
	job := Workload{Namespace: "batch", Kind: "Deployment"}
	for _, c := range []struct {
		w           Workload
		audit, want string
	}{
		{web, "PlacementPolicy shop/next", "PlacementPolicy shop/now"},
		{db, "PlacementPolicy shop/next", "Namespace shop"},
		{job, "Namespace batch", ""},
	} {
		if got := resolve(c.w, false); got != c.want {
			t.Errorf("%v: enforced source %q, want %q", c.w, got, c.want)
		}
		if got := resolve(c.w, true); got != c.audit {
			t.Errorf("%v: audited source %q, want %q", c.w, got, c.audit)
		}
	}

	moves := func(n int) func(*strategy.Strategy) int { return func(*strategy.Strategy) int { return n } }
	ws := []Governable{
		{Workload: web, Name: "web", Moves: moves(3), Exact: func(*strategy.Strategy) (bool, string) { return false, "off" }},
		{Workload: db, Name: "db", Moves: moves(0), Exact: func(*strategy.Strategy) (bool, string) { return true, "" }},
		{Workload: job, Name: "job", Moves: moves(4)},
	}
	statuses, audited := Statuses(idx.p, ws, func(ns string) *Namespace { return idx.namespaces[ns] }, nil)
	got := map[string]*Status{}
	for c, s := range statuses {
		got[c.Name] = s
	}
	if s := got["next"]; !s.Audit || s.Workloads != 2 || s.Exact != 1 || s.WouldMove != 3 {
		t.Errorf("the audited policy: %+v, want audit, 2 workloads, 1 exact, 3 pods to move", s)
	}
	if s := got["now"]; s.Audit || s.Workloads != 1 || s.WouldMove != 0 {
		t.Errorf("the enforced policy under it: %+v, want it to govern web", s)
	}
	if audited != (Audited{Workloads: 3, WouldMove: 7}) {
		t.Errorf("audited %+v, want 3 workloads (2 by the policy, 1 by the namespace default), 7 pods", audited)
	}
	conds := got["next"].conditions(nil, metav1.NewTime(time.Unix(1, 0)))
	if g := conds[3]; g.Type != v1alpha1.ConditionGoverning || g.Reason != "Audit" || !strings.Contains(g.Message, "would move 3 pods") {
		t.Errorf("Governing of the audited policy: %+v", g)
	}
}

// TestSuspendAndStop: a suspended policy's link carries the converge opt-out, which
// strategy.Held reads only for the workloads it governs; the converge annotation on the
// webhook's namespace stops every move, on another namespace that namespace's.
func TestSuspendAndStop(t *testing.T) {
	p := pp("shop", "paused", "a=1", 0, nil)
	p.Spec.Suspend = true
	stopped := namespace("ops", nil, "")
	stopped.Annotations = map[string]string{strategy.AnnotationConverge: "false"}
	idx := NewIndex([]v1alpha1.PlacementPolicy{p}, nil, []corev1.Namespace{namespace("shop", nil, ""), stopped})
	w := Workload{Namespace: "shop", Kind: "Deployment"}
	chain := idx.AppendLinks([]strategy.AnnotatedObject{{Name: "Deployment shop/web"}}, w)
	src := strategy.Resolve(chain...)
	if got := strategy.Held(chain, src.Object); got != "PlacementPolicy shop/paused is suspended (spec.suspend)" {
		t.Errorf("held %q", got)
	}
	own := idx.AppendLinks([]strategy.AnnotatedObject{{Name: "Deployment shop/own", Annotations: map[string]string{strategy.AnnotationStrategy: "b=1"}}}, w)
	if got := strategy.Held(own, strategy.Resolve(own...).Object); got != "" {
		t.Errorf("a workload with its own strategy is held by a policy that does not govern it: %q", got)
	}
	if got := Stopped(idx.MovesOff, "cksw")("ops"); !strings.Contains(got, "moves in namespace ops are stopped") {
		t.Errorf("namespace stop: %q", got)
	}
	if got := Stopped(idx.MovesOff, "cksw")("shop"); got != "" {
		t.Errorf("shop is not stopped: %q", got)
	}
	if got := Stopped(idx.MovesOff, "ops")(""); !strings.Contains(got, "every move of the convergence loop is stopped") {
		t.Errorf("cluster-wide stop: %q", got)
	}
}
