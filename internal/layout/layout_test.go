package layout

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/"

// allowed lists, for each product package, the packages of this module it may import
// (its doc.go says why). A package missing here fails the test: a new one states its
// place.
var allowed = map[string][]string{
	"strategy":                          nil,
	"ownership":                         nil,
	"karpenter/nodegroups":              nil,
	"api/v1alpha1":                      nil,
	"policy":                            {"api/v1alpha1", "strategy"},
	"karpenter":                         {"karpenter/nodegroups", "strategy", "providerid"},
	"clusterview":                       {"strategy", "policy"},
	"ledger":                            {"strategy", "clusterview", "ownership"},
	"webhook":                           nil,
	"webhook/placement":                 {"strategy", "clusterview", "karpenter", "imagearch", "webhook"},
	"webhook/validation":                {"strategy", "policy", "api/v1alpha1", "imagearch", "webhook", "webhook/placement"},
	"webhook/selfcert":                  nil,
	"webhook/admissiontoken":            nil,
	"webhook/peerauth":                  nil,
	"unavailability":                    {"strategy", "ownership"},
	"interruption":                      {"strategy", "providerid"},
	"converge":                          {"strategy", "clusterview", "karpenter", "ownership", "unavailability", "interruption"},
	"report":                            {"strategy", "clusterview", "karpenter", "karpenter/nodegroups", "unavailability", "pricing", "policy", "api/v1alpha1"},
	"pricing":                           nil,
	"imagearch":                         nil,
	"providerid":                        nil,
	"plan":                              {"strategy", "clusterview", "karpenter", "karpenter/nodegroups", "unavailability", "report", "pricing", "policy"},
	"internal/clientmetrics":            nil,
	"internal/promcheck":                nil,
	"cmd/custom-kube-scheduler-webhook": {"*"},
}

// testOnly are packages for tests, never imported by product code.
var testOnly = []string{"internal/testcert", "webhook/internal/webhooktest", "internal/testregistry", "internal/fakeleases", "internal/awsfake", "internal/harness", "internal/layout", "internal/doccheck"}

// TestImportsFollowTheLayout checks the product packages' imports (test files aside)
// against allowed: no package but cmd and the admission handlers import webhook, clusterview builds on nothing of
// admission or the loop, and so on.
func TestImportsFollowTheLayout(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, ok := strings.CutPrefix(fields[0], module)
		if !ok || isTestOnly(pkg) || strings.HasPrefix(pkg, "bench/") || strings.HasPrefix(pkg, "scripts/") || pkg == "deploy/test" || pkg == "e2e" {
			continue // tests, benchmarks and tooling import what they test
		}
		may, known := allowed[pkg]
		if !known {
			t.Errorf("package %s has no place in the layout: add it to allowed with what it may import", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			dep, ours := strings.CutPrefix(imp, module)
			switch {
			case !ours:
			case isTestOnly(dep):
				t.Errorf("%s imports the test-only package %s", pkg, dep)
			case len(may) == 1 && may[0] == "*":
			case !slices.Contains(may, dep):
				t.Errorf("%s imports %s; it may import only %v", pkg, dep, may)
			}
		}
	}
}

func isTestOnly(pkg string) bool { return slices.Contains(testOnly, pkg) }
