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

const (
	sTemplate  = "t=1"
	sWorkload  = "w=1"
	sNamespace = "ns=1"
)

func pp(ns, name, strat string, prio int32, sel map[string]string, kinds ...v1alpha1.WorkloadKind) v1alpha1.PlacementPolicy {
	p := v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.PlacementPolicySpec{Strategy: strat, Priority: prio, Kinds: kinds}}
	if sel != nil {
		p.Spec.Selector = &metav1.LabelSelector{MatchLabels: sel}
	}
	return p
}

func cpp(name, strat string, prio int32, sel, nsSel map[string]string) v1alpha1.ClusterPlacementPolicy {
	p := v1alpha1.ClusterPlacementPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ClusterPlacementPolicySpec{PlacementPolicySpec: v1alpha1.PlacementPolicySpec{Strategy: strat, Priority: prio}}}
	if sel != nil {
		p.Spec.Selector = &metav1.LabelSelector{MatchLabels: sel}
	}
	if nsSel != nil {
		p.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: nsSel}
	}
	return p
}

func namespace(name string, lbls map[string]string, strat string) corev1.Namespace {
	ns := corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}}
	if strat != "" {
		ns.Annotations = map[string]string{strategy.AnnotationStrategy: strat, "UseCustomKubeScheduler": "false"}
	}
	return ns
}

// TestPrecedence walks the one rule: pod template, workload, the most specific policy
// (namespaced before cluster, then priority, then name), the namespace default; and
// UseCustomKubeScheduler "false" on the workload opts out of all of them.
func TestPrecedence(t *testing.T) {
	web := map[string]string{"app": "web"}
	for _, tc := range []struct {
		name       string
		template   map[string]string
		workload   map[string]string
		kind       string
		ns         []corev1.Namespace
		namespaced []v1alpha1.PlacementPolicy
		cluster    []v1alpha1.ClusterPlacementPolicy
		wantRaw    string // "" when no strategy is active
		wantFrom   string
		conflicts  int
	}{
		{name: "nothing", ns: []corev1.Namespace{namespace("shop", nil, "")}},
		{name: "namespace default", ns: []corev1.Namespace{namespace("shop", nil, sNamespace)},
			wantRaw: sNamespace, wantFrom: "Namespace shop"},
		{name: "cluster policy over namespace default", ns: []corev1.Namespace{namespace("shop", nil, sNamespace)},
			cluster: []v1alpha1.ClusterPlacementPolicy{cpp("spot", "c=1", 0, nil, nil)},
			wantRaw: "c=1", wantFrom: "ClusterPlacementPolicy spot"},
		{name: "namespaced policy over a cluster policy of higher priority",
			namespaced: []v1alpha1.PlacementPolicy{pp("shop", "web", "p=1", 0, web)},
			cluster:    []v1alpha1.ClusterPlacementPolicy{cpp("spot", "c=1", 100, nil, nil)},
			wantRaw:    "p=1", wantFrom: "PlacementPolicy shop/web"},
		{name: "workload annotation over every policy", workload: map[string]string{strategy.AnnotationStrategy: sWorkload},
			ns:         []corev1.Namespace{namespace("shop", nil, sNamespace)},
			namespaced: []v1alpha1.PlacementPolicy{pp("shop", "web", "p=1", 0, nil)},
			wantRaw:    sWorkload, wantFrom: "Deployment shop/web"},
		{name: "pod template over the workload", template: map[string]string{strategy.AnnotationStrategy: sTemplate},
			workload: map[string]string{strategy.AnnotationStrategy: sWorkload},
			wantRaw:  sTemplate, wantFrom: "pod template"},
		{name: "opt-out on the workload beats policy and namespace", workload: map[string]string{strategy.AnnotationOptIn: "false"},
			ns:         []corev1.Namespace{namespace("shop", nil, sNamespace)},
			namespaced: []v1alpha1.PlacementPolicy{pp("shop", "web", "p=1", 0, nil)}},
		{name: "higher priority wins", namespaced: []v1alpha1.PlacementPolicy{pp("shop", "a", "a=1", 1, nil), pp("shop", "b", "b=1", 5, nil)},
			wantRaw: "b=1", wantFrom: "PlacementPolicy shop/b"},
		{name: "equal priority: first name wins, a conflict", namespaced: []v1alpha1.PlacementPolicy{pp("shop", "zz", "z=1", 0, nil), pp("shop", "aa", "a=1", 0, nil)},
			wantRaw: "a=1", wantFrom: "PlacementPolicy shop/aa", conflicts: 1},
		{name: "selector not matching", namespaced: []v1alpha1.PlacementPolicy{pp("shop", "api", "p=1", 0, map[string]string{"app": "api"})}},
		{name: "other namespace's policy", namespaced: []v1alpha1.PlacementPolicy{pp("other", "web", "p=1", 0, nil)}},
		{name: "kinds excluding Deployment", namespaced: []v1alpha1.PlacementPolicy{pp("shop", "sts", "p=1", 0, nil, v1alpha1.KindStatefulSet)}},
		{name: "kinds including StatefulSet", kind: "StatefulSet", namespaced: []v1alpha1.PlacementPolicy{pp("shop", "sts", "p=1", 0, nil, v1alpha1.KindStatefulSet)},
			wantRaw: "p=1", wantFrom: "PlacementPolicy shop/sts"},
		{name: "kind Job governs a Job", kind: "Job", namespaced: []v1alpha1.PlacementPolicy{pp("shop", "batch", "p=1", 0, nil, v1alpha1.KindJob)},
			wantRaw: "p=1", wantFrom: "PlacementPolicy shop/batch"},
		{name: "kind Job governs a CronJob's Jobs", kind: "CronJob", namespaced: []v1alpha1.PlacementPolicy{pp("shop", "batch", "p=1", 0, nil, v1alpha1.KindJob)},
			wantRaw: "p=1", wantFrom: "PlacementPolicy shop/batch"},
		{name: "kind CronJob governs a CronJob's Jobs", kind: "CronJob", namespaced: []v1alpha1.PlacementPolicy{pp("shop", "cron", "p=1", 0, nil, v1alpha1.KindCronJob)},
			wantRaw: "p=1", wantFrom: "PlacementPolicy shop/cron"},
		{name: "kind CronJob does not govern a Job of its own", kind: "Job", namespaced: []v1alpha1.PlacementPolicy{pp("shop", "cron", "p=1", 0, nil, v1alpha1.KindCronJob)}},
		{name: "namespaceSelector matching", ns: []corev1.Namespace{namespace("shop", map[string]string{"tier": "batch"}, "")},
			cluster: []v1alpha1.ClusterPlacementPolicy{cpp("batch", "c=1", 0, nil, map[string]string{"tier": "batch"})},
			wantRaw: "c=1", wantFrom: "ClusterPlacementPolicy batch"},
		{name: "namespaceSelector not matching", ns: []corev1.Namespace{namespace("shop", map[string]string{"tier": "web"}, "")},
			cluster: []v1alpha1.ClusterPlacementPolicy{cpp("batch", "c=1", 0, nil, map[string]string{"tier": "batch"})}},
		{name: "invalid strategy still governs (its pods are admitted unchanged)", namespaced: []v1alpha1.PlacementPolicy{pp("shop", "bad", "nolabel", 0, nil)},
			ns:      []corev1.Namespace{namespace("shop", nil, sNamespace)},
			wantRaw: "nolabel", wantFrom: "PlacementPolicy shop/bad"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idx := NewIndex(tc.namespaced, tc.cluster, tc.ns)
			kind := tc.kind
			if kind == "" {
				kind = "Deployment"
			}
			w := Workload{Namespace: "shop", Kind: kind, Labels: web}
			chain := []strategy.AnnotatedObject{{Name: "pod template", Annotations: tc.template}, {Name: kind + " shop/web", Annotations: tc.workload}}
			chain = idx.AppendLinks(chain, w)
			res := strategy.Resolve(chain...)
			if got := res.Raw; !res.Active() {
				got = ""
				if tc.wantRaw != "" {
					t.Fatalf("no active strategy, want %q from %s (source %+v)", tc.wantRaw, tc.wantFrom, res.Source)
				}
			} else if got != tc.wantRaw || res.Object != tc.wantFrom {
				t.Fatalf("strategy %q from %q, want %q from %q", got, res.Object, tc.wantRaw, tc.wantFrom)
			}
			if m := idx.Match(w); len(m.Conflicts) != tc.conflicts {
				t.Errorf("conflicts %d, want %d", len(m.Conflicts), tc.conflicts)
			}
		})
	}
}

// TestInvalidSelectorMatchesNothing: a selector the API would let through but that does
// not parse governs nothing, and says why.
func TestInvalidSelectorMatchesNothing(t *testing.T) {
	p := pp("shop", "bad", "a=1", 0, nil)
	p.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}}
	c := CompileNamespaced(&p)
	if c.SelectorErr == nil || !strings.Contains(c.SelectorErr.Error(), "spec.selector") {
		t.Fatalf("SelectorErr = %v", c.SelectorErr)
	}
	idx := NewIndex([]v1alpha1.PlacementPolicy{p}, nil, nil)
	if links := idx.AppendLinks(nil, Workload{Namespace: "shop", Kind: "Deployment"}); len(links) != 0 {
		t.Fatalf("links %v", links)
	}
}

// TestLookupAllocatesNothing: the common case (no policy in the namespace, 200 elsewhere
// and a few cluster ones) and a match both allocate nothing when dst has room.
func TestLookupAllocatesNothing(t *testing.T) {
	var namespaced []v1alpha1.PlacementPolicy
	for i := range 200 {
		namespaced = append(namespaced, pp("other-"+string(rune('a'+i%20)), "p"+string(rune('a'+i/20)), "a=1", 0, map[string]string{"app": "x"}))
	}
	cluster := []v1alpha1.ClusterPlacementPolicy{cpp("batch", "c=1", 0, map[string]string{"app": "batch"}, map[string]string{"tier": "batch"})}
	idx := NewIndex(namespaced, cluster, []corev1.Namespace{namespace("shop", map[string]string{"tier": "web"}, "")})
	buf := make([]strategy.AnnotatedObject, 0, 4)
	w := Workload{Namespace: "shop", Kind: "Deployment", Labels: map[string]string{"app": "web"}}
	if n := testing.AllocsPerRun(100, func() { buf = idx.AppendLinks(buf[:0], w) }); n != 0 {
		t.Errorf("no policy in the namespace: %v allocations per lookup", n)
	}
	w.Namespace = "other-a"
	w.Labels = map[string]string{"app": "x"}
	if n := testing.AllocsPerRun(100, func() { buf = idx.AppendLinks(buf[:0], w) }); n != 0 || len(buf) != 1 {
		t.Errorf("a matching policy: %v allocations per lookup, links %v", n, buf)
	}
}

// A policy's move timing rides on its link as the workload annotations say it, so the
// most specific link wins (strategy.TimingOf).
func TestPolicyTimingOnItsLink(t *testing.T) {
	p := &v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}, Spec: v1alpha1.PlacementPolicySpec{
		Strategy:        "a=1",
		MoveWindow:      &v1alpha1.MoveWindow{Schedule: "0 2 * * 1-5", Duration: metav1.Duration{Duration: 3 * time.Hour}, TimeZone: "Europe/Berlin", MaxMoves: 20},
		MinFallbackStay: &metav1.Duration{Duration: 30 * time.Minute},
	}}
	c := CompileNamespaced(p)
	got := strategy.TimingOf([]strategy.AnnotatedObject{{Name: "Deployment shop/web"}, c.Link}, c.Link.Name, strategy.Timing{})
	if got.Err != nil || got.Window == nil || got.Window.String() != "schedule=0 2 * * 1-5; duration=3h0m0s; timeZone=Europe/Berlin; maxMoves=20" ||
		got.MinStay != 30*time.Minute || got.WindowSource != "PlacementPolicy shop/web" {
		t.Errorf("timing %+v, err %v", got, got.Err)
	}
}

// A policy's spec.moveJobPods rides on its link as the annotation and opts in the Jobs
// it governs; a Job's own annotation saying "false" overrides it.
func TestPolicyMoveJobPodsOnItsLink(t *testing.T) {
	p := &v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "batch", Name: "jobs"}, Spec: v1alpha1.PlacementPolicySpec{Strategy: "a=1", MoveJobPods: true}}
	c := CompileNamespaced(p)
	job := strategy.AnnotatedObject{Name: "Job batch/x"}
	if why := strategy.JobHeld([]strategy.AnnotatedObject{job, c.Link}, c.Link.Name); why != "" {
		t.Errorf("a policy with moveJobPods: held %q", why)
	}
	job.Annotations = map[string]string{strategy.AnnotationMoveJobPods: "false"}
	if why := strategy.JobHeld([]strategy.AnnotatedObject{job, c.Link}, c.Link.Name); why == "" {
		t.Error("the Job's own \"false\" must override its policy's moveJobPods")
	}
	if why := strategy.JobHeld([]strategy.AnnotatedObject{{Name: "Job batch/z"}, c.Link}, "Job batch/z"); why == "" {
		t.Error("a policy that does not govern the Job (its own strategy does) must not opt it in")
	}
	if why := strategy.JobHeld([]strategy.AnnotatedObject{{Name: "Job batch/y"}}, "Job batch/y"); why == "" {
		t.Error("a Job without the opt-in must be held")
	}
}
