package main

import (
	"os"
	"strings"
	"testing"
)

// cliDocPath is the CLI reference page, generated from the commands' own help.
const cliDocPath = "../../docs/cli.md"

// cliReference renders docs/cli.md: the --help of plan, spread and version, as the
// commands print it.
func cliReference(t *testing.T) string {
	t.Helper()
	// A flag's default may come from the environment (--eks-cluster-name from
	// EKS_CLUSTER_NAME): the page shows the help of a clean environment.
	t.Setenv("EKS_CLUSTER_NAME", "")
	if err := os.Unsetenv("EKS_CLUSTER_NAME"); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString(`# Command-line reference: plan, spread, version

Besides ` + "`serve`" + ` (the webhook; its settings are in [configuration.md](configuration.md)),
the binary has three commands: ` + "`plan`" + ` (how a strategy splits N replicas, and with
` + "`--cluster`" + ` whether the cluster has room), ` + "`spread`" + ` (how live workloads are
spread; also ` + "`kubectl spread`" + ` when the binary is named ` + "`kubectl-spread`" + `) and
` + "`version`" + `. Below is each one's ` + "`--help`" + `, exactly as it prints it; worked examples
are in [spread-and-plan.md](spread-and-plan.md).

This page is generated: run ` + "`make docs`" + ` after changing a command's flags or help
(` + "`TestCLIReference`" + ` fails while the page differs from the help).
`)
	for _, name := range []string{"plan", "spread", "version"} {
		out, err := run(name, "--help")
		if err != nil {
			t.Fatalf("%s --help: %v", name, err)
		}
		b.WriteString("\n## `" + name + "`\n\n```text\n" + strings.TrimRight(out, "\n") + "\n```\n")
	}
	return b.String()
}

// TestCLIReference fails when docs/cli.md is not the commands' help as they print it
// now. UPDATE_DOCS=1 rewrites the page instead (make docs, go generate).
func TestCLIReference(t *testing.T) {
	want := cliReference(t)
	if os.Getenv("UPDATE_DOCS") == "1" {
		if err := os.WriteFile(cliDocPath, []byte(want), 0o644); err != nil {
			t.Fatalf("writing %s: %v", cliDocPath, err)
		}
		return
	}
	got, err := os.ReadFile(cliDocPath)
	if err != nil {
		t.Fatalf("reading the CLI reference: %v (generate it with `make docs`)", err)
	}
	if string(got) == want {
		return
	}
	gotLines, wantLines := strings.Split(string(got), "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(gotLines), len(wantLines)); i++ {
		var g, w string
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if g != w {
			t.Fatalf("docs/cli.md differs from the commands' help at line %d:\n page: %q\n help: %q\nregenerate it with `make docs`", i+1, g, w)
		}
	}
}
