package deploytest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	protocol "github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// The chart's call filters name keys of the pod-seat protocol as text (CEL and a
// label selector the API server evaluates). They must spell the keys the product
// uses, or the API server would call the webhook for pods it skips, or skip pods it
// should place.
func TestChartFiltersSpellTheProtocol(t *testing.T) {
	chart := filepath.Join("..", "chart", "custom-kube-scheduler-webhook")
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(chart, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	webhooks, values := read("templates/webhooks.yaml"), read("values.yaml")
	for _, want := range []string{
		"!('" + protocol.AnnotationSeat + "' in object.metadata.annotations)",
		"'" + protocol.AnnotationStrategy + "' in object.metadata.annotations",
		"'" + protocol.AnnotationStrategyAlias + "' in object.metadata.annotations",
		"'" + protocol.AnnotationStrategy + "' in object.spec.template.metadata.annotations",
		"'" + protocol.AnnotationStrategyAlias + "' in object.spec.template.metadata.annotations",
	} {
		if !strings.Contains(webhooks, want) {
			t.Errorf("templates/webhooks.yaml lacks %s", want)
		}
	}
	if want := "- key: " + protocol.LabelManaged + "\n      operator: DoesNotExist"; !strings.Contains(values, want) {
		t.Errorf("values.yaml's objectSelector lacks %q", want)
	}
}
