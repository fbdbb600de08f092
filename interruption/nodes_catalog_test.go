package interruption_test

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/interruption"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
)

// The interruption tracker's node view is the catalog's Node watch: a node by the
// instance its providerID names, every node with its instance ("" for none), and not
// synced before the catalog has listed.
func TestNodesOfTheCatalog(t *testing.T) {
	spot := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "spot-1", Labels: map[string]string{"capacity": "spot"}},
		Spec:       corev1.NodeSpec{ProviderID: "aws:///eu-west-1a/i-0123456789abcdef0"},
	}
	bare := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bare", Labels: map[string]string{"capacity": "on-demand"}}}
	catalog, err := karpenter.NewCatalog(karpenter.Options{Kube: fake.NewClientset(spot, bare)})
	if err != nil {
		t.Fatal(err)
	}
	nodes := interruption.NodesOf(catalog)
	if nodes.HasSynced() {
		t.Fatal("synced before the catalog ran")
	}
	ctx := t.Context()
	go catalog.Run(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced) {
		t.Fatal("nodes never synced")
	}

	want := interruption.Node{Name: "spot-1", Instance: "i-0123456789abcdef0", Labels: spot.Labels}
	if got, ok := nodes.ByInstance("i-0123456789abcdef0"); !ok || !sameNode(got, want) {
		t.Errorf("ByInstance(i-0123456789abcdef0) = %+v, %v; want %+v", got, ok, want)
	}
	if got, ok := nodes.ByInstance("bare"); ok {
		t.Errorf("ByInstance(bare) = %+v; a node without a providerID is no instance", got)
	}
	seen := map[string]interruption.Node{}
	nodes.Each(func(n interruption.Node) { seen[n.Name] = n })
	if len(seen) != 2 || !sameNode(seen["spot-1"], want) ||
		!sameNode(seen["bare"], interruption.Node{Name: "bare", Labels: bare.Labels}) {
		t.Errorf("Each saw %+v, want spot-1 (i-0123456789abcdef0) and bare (no instance)", seen)
	}
}

func sameNode(a, b interruption.Node) bool {
	return a.Name == b.Name && a.Instance == b.Instance && maps.Equal(a.Labels, b.Labels)
}
