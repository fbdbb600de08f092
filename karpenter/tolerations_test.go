package karpenter

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

func taint(key, value string, effect corev1.TaintEffect) corev1.Taint {
	return corev1.Taint{Key: key, Value: value, Effect: effect}
}

func tol(key string, op corev1.TolerationOperator, value string, effect corev1.TaintEffect) corev1.Toleration {
	return corev1.Toleration{Key: key, Operator: op, Value: value, Effect: effect}
}

func TestTolerationsFor(t *testing.T) {
	sources := []Source{
		{Kind: KindNodePool, Name: "spot-a", Taints: []corev1.Taint{
			taint("capacity", "spot", corev1.TaintEffectNoSchedule),
			taint("dedicated", "", corev1.TaintEffectNoExecute),
		}},
		{Kind: KindNodePool, Name: "spot-b", Taints: []corev1.Taint{
			taint("capacity", "spot", corev1.TaintEffectNoSchedule),       // same as spot-a
			taint("dedicated", "batch", corev1.TaintEffectNoExecute),      // covered by Exists dedicated
			taint("capacity", "spot", corev1.TaintEffectPreferNoSchedule), // other effect
		}},
		{Kind: KindNodeGroup, Name: "ng", Taints: []corev1.Taint{taint("team", "ml", corev1.TaintEffectNoSchedule)}},
		{Kind: KindNode, Name: "n1", Taints: []corev1.Taint{taint("node.kubernetes.io/unreachable", "", corev1.TaintEffectNoExecute)}},
	}
	got := TolerationsFor(sources)
	want := []corev1.Toleration{
		tol("capacity", corev1.TolerationOpEqual, "spot", corev1.TaintEffectNoSchedule),
		tol("dedicated", corev1.TolerationOpExists, "", corev1.TaintEffectNoExecute),
		tol("capacity", corev1.TolerationOpEqual, "spot", corev1.TaintEffectPreferNoSchedule),
		tol("team", corev1.TolerationOpEqual, "ml", corev1.TaintEffectNoSchedule),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("TolerationsFor =\n%+v\nwant\n%+v", got, want)
	}
	// Every NodePool/NodeGroup taint is tolerated by the result.
	for _, s := range sources[:3] {
		for i := range s.Taints {
			if !tolerated(got, &s.Taints[i]) {
				t.Errorf("taint %v of %s not tolerated", s.Taints[i], s)
			}
		}
	}
	if len(TolerationsFor(nil)) != 0 || len(TolerationsFor([]Source{{Kind: KindNode, Taints: sources[3].Taints}})) != 0 {
		t.Error("tolerations derived from no taints or from Node taints")
	}
}

func tolerated(tols []corev1.Toleration, t *corev1.Taint) bool {
	for i := range tols {
		if tols[i].ToleratesTaint(klog.Background(), t, false) {
			return true
		}
	}
	return false
}

func TestMergeTolerations(t *testing.T) {
	spotNS := tol("capacity", corev1.TolerationOpEqual, "spot", corev1.TaintEffectNoSchedule)
	cases := []struct {
		name     string
		existing []corev1.Toleration
		add      []corev1.Toleration
		want     []corev1.Toleration
	}{
		{"add to none", nil, []corev1.Toleration{spotNS}, []corev1.Toleration{spotNS}},
		{"exact duplicate", []corev1.Toleration{spotNS}, []corev1.Toleration{spotNS}, []corev1.Toleration{spotNS}},
		{"empty operator means Equal",
			[]corev1.Toleration{tol("capacity", "", "spot", corev1.TaintEffectNoSchedule)},
			[]corev1.Toleration{spotNS},
			[]corev1.Toleration{tol("capacity", "", "spot", corev1.TaintEffectNoSchedule)}},
		{"Exists on key covers",
			[]corev1.Toleration{tol("capacity", corev1.TolerationOpExists, "", corev1.TaintEffectNoSchedule)},
			[]corev1.Toleration{spotNS},
			[]corev1.Toleration{tol("capacity", corev1.TolerationOpExists, "", corev1.TaintEffectNoSchedule)}},
		{"empty key Exists covers everything",
			[]corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			[]corev1.Toleration{spotNS, tol("x", corev1.TolerationOpExists, "", corev1.TaintEffectNoExecute)},
			[]corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
		{"empty key Exists with an effect covers that effect only",
			[]corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
			[]corev1.Toleration{spotNS},
			[]corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}, spotNS}},
		{"any effect covers",
			[]corev1.Toleration{tol("capacity", corev1.TolerationOpEqual, "spot", "")},
			[]corev1.Toleration{spotNS},
			[]corev1.Toleration{tol("capacity", corev1.TolerationOpEqual, "spot", "")}},
		{"other effect does not cover",
			[]corev1.Toleration{tol("capacity", corev1.TolerationOpEqual, "spot", corev1.TaintEffectNoExecute)},
			[]corev1.Toleration{spotNS},
			[]corev1.Toleration{tol("capacity", corev1.TolerationOpEqual, "spot", corev1.TaintEffectNoExecute), spotNS}},
		{"other value does not cover",
			[]corev1.Toleration{tol("capacity", corev1.TolerationOpEqual, "od", corev1.TaintEffectNoSchedule)},
			[]corev1.Toleration{spotNS},
			[]corev1.Toleration{tol("capacity", corev1.TolerationOpEqual, "od", corev1.TaintEffectNoSchedule), spotNS}},
		{"Equal does not cover Exists",
			[]corev1.Toleration{spotNS},
			[]corev1.Toleration{tol("capacity", corev1.TolerationOpExists, "", corev1.TaintEffectNoSchedule)},
			[]corev1.Toleration{spotNS, tol("capacity", corev1.TolerationOpExists, "", corev1.TaintEffectNoSchedule)}},
		{"specific effect does not cover any effect",
			[]corev1.Toleration{spotNS},
			[]corev1.Toleration{tol("capacity", corev1.TolerationOpEqual, "spot", "")},
			[]corev1.Toleration{spotNS, tol("capacity", corev1.TolerationOpEqual, "spot", "")}},
		{"duplicates inside add",
			nil,
			[]corev1.Toleration{spotNS, spotNS},
			[]corev1.Toleration{spotNS}},
		{"existing duplicates and order kept",
			[]corev1.Toleration{spotNS, tol("a", corev1.TolerationOpExists, "", ""), spotNS},
			nil,
			[]corev1.Toleration{spotNS, tol("a", corev1.TolerationOpExists, "", ""), spotNS}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			existingCopy := append([]corev1.Toleration(nil), tc.existing...)
			got := MergeTolerations(tc.existing, tc.add)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("MergeTolerations =\n%+v\nwant\n%+v", got, tc.want)
			}
			if !reflect.DeepEqual(existingCopy, tc.existing) {
				t.Fatal("existing modified")
			}
		})
	}
}

func TestMergeTolerationsKeepsTolerationSeconds(t *testing.T) {
	secs := int64(300)
	existing := []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &secs}}
	got := MergeTolerations(existing, []corev1.Toleration{tol("dedicated", corev1.TolerationOpExists, "", corev1.TaintEffectNoExecute)})
	if len(got) != 1 || got[0].TolerationSeconds == nil || *got[0].TolerationSeconds != 300 {
		t.Fatalf("the owner's toleration was not kept alone: %+v", got)
	}
}

// FuzzMergeTolerations checks the merge invariants on arbitrary tolerations:
// existing comes first unchanged, every added toleration's taint stays
// tolerated, and merging the result again adds nothing.
func FuzzMergeTolerations(f *testing.F) {
	f.Add("capacity", "Equal", "spot", "NoSchedule", "capacity", "Exists", "", "NoSchedule")
	f.Add("", "Exists", "", "", "k", "Equal", "v", "NoExecute")
	f.Add("k", "", "v", "", "k", "Equal", "v", "PreferNoSchedule")
	effects := []corev1.TaintEffect{"", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}
	f.Fuzz(func(t *testing.T, k1, op1, v1, e1, k2, op2, v2, e2 string) {
		mk := func(k, op, v, e string) corev1.Toleration {
			to := corev1.Toleration{Key: k, Operator: corev1.TolerationOperator(op), Value: v, Effect: corev1.TaintEffect(e)}
			if to.Operator == corev1.TolerationOpExists {
				to.Value = "" // API validation: Exists has no value
			}
			return to
		}
		existing := []corev1.Toleration{mk(k1, op1, v1, e1)}
		add := []corev1.Toleration{mk(k2, op2, v2, e2), mk(k1, op1, v1, e1)}
		got := MergeTolerations(existing, add)
		if !reflect.DeepEqual(got[:1], existing) {
			t.Fatalf("existing not kept first: %+v", got)
		}
		if len(got) > 2 {
			t.Fatalf("a duplicate was added: %+v", got)
		}
		// Any concrete taint an added toleration tolerates is still tolerated.
		for _, a := range add {
			for _, eff := range effects[1:] {
				if a.Effect != "" && a.Effect != eff {
					continue
				}
				tt := corev1.Taint{Key: a.Key, Value: a.Value, Effect: eff}
				if a.ToleratesTaint(klog.Background(), &tt, false) && !tolerated(got, &tt) {
					t.Fatalf("taint %+v tolerated by %+v is no longer tolerated by %+v", tt, a, got)
				}
			}
		}
		if again := MergeTolerations(got, add); !reflect.DeepEqual(again, got) {
			t.Fatalf("merge is not idempotent: %+v then %+v", got, again)
		}
	})
}
