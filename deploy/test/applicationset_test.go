package deploytest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/template"

	"sigs.k8s.io/yaml"
)

// cluster is what Argo CD's cluster generator hands a goTemplate ApplicationSet for one
// cluster Secret: name, server and the Secret's labels and annotations under metadata.
type cluster struct {
	name, server string
	annotations  map[string]string
}

func (c cluster) params() map[string]any {
	return map[string]any{
		"name": c.name, "nameNormalized": c.name, "server": c.server, "project": "default",
		"metadata": map[string]any{
			"labels":      map[string]string{"custom-kube-scheduler-webhook.io/install": "true"},
			"annotations": c.annotations,
		},
	}
}

// renderStrings executes every string of v as a Go template with params, as Argo CD's
// goTemplate mode renders an ApplicationSet's template (missingkey=error, as the
// example sets).
func renderStrings(t *testing.T, v any, params map[string]any) any {
	t.Helper()
	switch x := v.(type) {
	case string:
		tpl, err := template.New("").Option("missingkey=error").Parse(x)
		if err != nil {
			t.Fatalf("template %q: %v", x, err)
		}
		var b bytes.Buffer
		if err := tpl.Execute(&b, params); err != nil {
			t.Fatalf("rendering %q: %v", x, err)
		}
		return b.String()
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = renderStrings(t, e, params)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = renderStrings(t, e, params)
		}
		return out
	}
	return v
}

// The fleet example (deploy/examples/applicationset.yaml) gives each cluster its own
// Application, destination and per-cluster values, from the cluster Secret alone. With
// APPSET_OUT set, each cluster's Helm values are written there as <cluster>.yaml, which
// deploy/test/static.sh renders the chart with.
func TestApplicationSetRendersPerCluster(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "examples", "applicationset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var set map[string]any
	if err := yaml.Unmarshal(raw, &set); err != nil {
		t.Fatalf("applicationset.yaml: %v", err)
	}
	spec := set["spec"].(map[string]any)
	if spec["goTemplate"] != true {
		t.Fatal("the example must use goTemplate: true (what this test renders)")
	}
	if _, ok := spec["generators"].([]any)[0].(map[string]any)["clusters"]; !ok {
		t.Fatal("the example's generator is not the cluster generator")
	}
	clusters := []cluster{
		{"prod-eu-west-1", "https://eu.example:443", map[string]string{
			"custom-kube-scheduler-webhook.io/region":             "eu-west-1",
			"custom-kube-scheduler-webhook.io/role-arn":           "arn:aws:iam::111122223333:role/cksw-prod-eu",
			"custom-kube-scheduler-webhook.io/interruption-queue": "prod-eu-west-1",
			"custom-kube-scheduler-webhook.io/cluster-cidrs":      "10.100.0.0/16, 10.0.0.0/12",
		}},
		{"prod-us-east-1", "https://us.example:443", map[string]string{
			"custom-kube-scheduler-webhook.io/region":             "us-east-1",
			"custom-kube-scheduler-webhook.io/role-arn":           "arn:aws:iam::444455556666:role/cksw-prod-us",
			"custom-kube-scheduler-webhook.io/interruption-queue": "prod-us-east-1",
			"custom-kube-scheduler-webhook.io/cluster-cidrs":      "172.20.0.0/16",
		}},
		{"staging", "https://staging.example:443", map[string]string{
			"custom-kube-scheduler-webhook.io/region":             "eu-west-1",
			"custom-kube-scheduler-webhook.io/role-arn":           "arn:aws:iam::111122223333:role/cksw-staging",
			"custom-kube-scheduler-webhook.io/interruption-queue": "",
			"custom-kube-scheduler-webhook.io/cluster-cidrs":      "",
		}},
	}
	out := os.Getenv("APPSET_OUT")
	names := map[string]bool{}
	for _, c := range clusters {
		app := renderStrings(t, spec["template"], c.params()).(map[string]any)
		name := app["metadata"].(map[string]any)["name"].(string)
		if names[name] {
			t.Fatalf("two clusters get the Application %s", name)
		}
		names[name] = true
		aspec := app["spec"].(map[string]any)
		if got := aspec["destination"].(map[string]any)["server"]; got != c.server {
			t.Errorf("%s: destination %v, want %s", c.name, got, c.server)
		}
		valuesText := aspec["source"].(map[string]any)["helm"].(map[string]any)["values"].(string)
		var values map[string]any
		if err := yaml.Unmarshal([]byte(valuesText), &values); err != nil {
			t.Fatalf("%s: the rendered values are not YAML: %v\n%s", c.name, err, valuesText)
		}
		role := values["serviceAccount"].(map[string]any)["annotations"].(map[string]any)["eks.amazonaws.com/role-arn"]
		networks := fmt.Sprint(values["imageArchitectures"].(map[string]any)["refusedNetworks"])
		if values["eksClusterName"] != c.name || role != c.annotations["custom-kube-scheduler-webhook.io/role-arn"] ||
			networks != "["+strings.Join(strings.Split(c.annotations["custom-kube-scheduler-webhook.io/cluster-cidrs"], ", "), " ")+"]" {
			t.Errorf("%s: values %v", c.name, values)
		}
		if out != "" {
			if err := os.WriteFile(filepath.Join(out, c.name+".yaml"), []byte(valuesText), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
