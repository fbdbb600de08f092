//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// Scope (the chart's `scope` value): registered opt-in, only namespaces labelled
// custom-kube-scheduler-webhook.io/enabled=true are sent, so a strategy Deployment in an
// unlabelled namespace stays as it is and one in a labelled namespace is placed.
// Registered as by default again, the unlabelled namespace is placed too.
func TestScopeOptIn(t *testing.T) {
	ctx := context.Background()
	if err := env.registerWith(ctx, "full", env.webhook.Port, "WEBHOOK_SCOPE=opt-in"); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		if err := env.register(context.Background(), "full"); err != nil {
			t.Errorf("restoring the default registration: %v", err)
		}
	}
	t.Cleanup(restore)

	off := newNamespace(ctx, t, "e2e-scope-off")
	on := newNamespace(ctx, t, "e2e-scope-on")
	label, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{strategy.LabelNamespaceEnabled: "true"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.CoreV1().Namespaces().Patch(ctx, on, types.MergePatchType, label, metav1.PatchOptions{}); err != nil {
		t.Fatalf("labelling namespace %s: %v", on, err)
	}

	skipped := deployment(off, "unlabelled", seedStrategy, 3, true)
	createDeployment(ctx, t, skipped)
	placed := deployment(on, "labelled", seedStrategy, 3, true)
	createDeployment(ctx, t, placed)
	assertNotMutated(t, settled(ctx, t, off, skipped.Name, 3), skipped.Spec.Template)
	assertExactSpread(ctx, t, seedStrategy, settled(ctx, t, on, placed.Name, 3))

	// The default scope: the unlabelled namespace is sent again.
	restore()
	if t.Failed() {
		return
	}
	again := deployment(off, "unlabelled-default-scope", seedStrategy, 3, true)
	createDeployment(ctx, t, again)
	assertExactSpread(ctx, t, seedStrategy, settled(ctx, t, off, again.Name, 3))
}
