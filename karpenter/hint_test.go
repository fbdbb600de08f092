package karpenter

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
)

// A term nothing serves gets the likely typo named: a key no capacity offers, or a
// value outside the ones offered, with the closest offered one.
func TestHint(t *testing.T) {
	pool := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "spot"}}
	pool.Spec.Template.Labels = map[string]string{"team": "payments"}
	pool.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{
		{Key: "nodesize", Operator: corev1.NodeSelectorOpIn, Values: []string{"spot4vcpu16gb", "spot8vcpu32gb"}},
	}
	group := nodegroups.Group{Name: "od", Labels: map[string]string{nodegroups.LabelNodeGroup: "od", nodegroups.LabelCapacityType: "ON_DEMAND"}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"rack": "r1"}}}
	v := vocabularyOf(NewMatcher(), []*karpv1.NodePool{pool}, []nodegroups.Group{group}, []*corev1.Node{node})
	for _, tc := range []struct {
		term   map[string]string
		want   string
		likely bool
	}{
		{map[string]string{"karpenter.sh/capcity-type": "spot"}, `no NodePool, node group or node offers the label key "karpenter.sh/capcity-type"; did you mean "karpenter.sh/capacity-type"?`, true},
		{map[string]string{"karpenter.sh/capacity-type": "spto"}, "offers karpenter.sh/capacity-type=spto (offered: on-demand, reserved, spot); did you mean karpenter.sh/capacity-type=spot?", true},
		{map[string]string{"nodesize": "spot4vcpu16g"}, "did you mean nodesize=spot4vcpu16gb?", true},
		{map[string]string{"eks.amazonaws.com/capacityType": "SPOT"}, "offers eks.amazonaws.com/capacityType=SPOT (offered: ON_DEMAND)", false},
		{map[string]string{"gpu": "true"}, `offers the label key "gpu"`, false},
		{map[string]string{"rack": "r1", "team": "payments"}, "", false}, // each offered, not together
		{map[string]string{"topology.kubernetes.io/zone": "anything"}, "", false},
	} {
		got, likely := hintFor(v, tc.term)
		if (tc.want == "" && got != "") || !strings.Contains(got, tc.want) || likely != tc.likely {
			t.Errorf("%v: got %q (likely %v), want %q (likely %v)", tc.term, got, likely, tc.want, tc.likely)
		}
	}
}
