package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the repository, two levels up from this package.
const repoRoot = "../.."

// TestRepositoryLinks checks every Markdown file of the repository (README.md,
// CONTRIBUTING.md, docs/, deploy/README.md, ...): no broken relative link, no missing
// file, no anchor that names no heading.
func TestRepositoryLinks(t *testing.T) {
	files, err := MarkdownFiles(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"README.md", "CONTRIBUTING.md", "docs/operating.md", "docs/runbooks/CustomKubeSchedulerWebhookNoReadyReplica.md"} {
		if !contains(files, must) {
			t.Errorf("%s is not among the checked files %v", must, files)
		}
	}
	problems, err := CheckLinks(repoRoot, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestRepositoryRunbookURLs checks every runbook_url under deploy/ (the chart's alert
// rules, the rendered manifests, the promtool tests) names a page of docs/runbooks.
func TestRepositoryRunbookURLs(t *testing.T) {
	n, problems, err := CheckRunbookURLs(repoRoot, "deploy")
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no runbook_url found under deploy/: the alert rules moved?")
	}
	for _, p := range problems {
		t.Error(p)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// writeTree writes files (path -> content) under a new temporary directory.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"The seat ledger":                          "the-seat-ledger",
		"How is it spread? `spread`":               "how-is-it-spread-spread",
		"Will it fit? `plan --cluster`":            "will-it-fit-plan---cluster",
		"Scale: 20,000 pods":                       "scale-20000-pods",
		"4. EKS managed node groups: IAM for":      "4-eks-managed-node-groups-iam-for",
		"The real node (`REAL_NODE=1`)":            "the-real-node-real_node1",
		"A [linked](other.md) heading":             "a-linked-heading",
		"CustomKubeSchedulerWebhookNoReadyReplica": "customkubeschedulerwebhooknoreadyreplica",
	} {
		if got := Anchor(heading); got != want {
			t.Errorf("Anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

// The checker finds each kind of broken link, and passes the good ones.
func TestCheckLinksFindsBrokenLinks(t *testing.T) {
	root := writeTree(t, map[string]string{
		"README.md": "# Title\n\n## Two words\n\n## Two words\n\n" +
			"[ok](docs/page.md) [ok](docs/page.md#a-section) [ok](#two-words) [ok](#two-words-1)\n" +
			"[ok](https://example.com/x#y) [ok](docs/) [ok](main.go#L3) `[not a link](nowhere.md)`\n" +
			"```\n[in code](nowhere.md)\n```\n" +
			"[missing file](docs/nope.md)\n" +
			"[bad anchor](docs/page.md#no-such-heading)\n" +
			"[bad local anchor](#three-words)\n" +
			"[outside](../elsewhere.md)\n" +
			"[ref]: docs/gone.md\n",
		"docs/page.md": "# Page\n\n## A section\n\n[up](../README.md#title)\n",
		"main.go":      "package main\n",
	})
	files, err := MarkdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := CheckLinks(root, files)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		`README.md:12: link "docs/nope.md": no file docs/nope.md`,
		`README.md:13: link "docs/page.md#no-such-heading": docs/page.md has no heading with the anchor #no-such-heading`,
		`README.md:14: link "#three-words": README.md has no heading with the anchor #three-words`,
		`README.md:15: link "../elsewhere.md" leaves the repository`,
		`README.md:16: link "docs/gone.md": no file docs/gone.md`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCheckRunbookURLs(t *testing.T) {
	root := writeTree(t, map[string]string{
		"docs/runbooks/GoodAlert.md":  "# GoodAlert\n\nWhat it means.\n",
		"docs/runbooks/WrongTitle.md": "# Something else\n",
		"deploy/alerts.yaml": "- alert: GoodAlert\n  annotations:\n    runbook_url: https://example.com/repo/blob/main/docs/runbooks/GoodAlert.md\n" +
			"- alert: Missing\n  annotations:\n    runbook_url: \"https://example.com/repo/blob/main/docs/runbooks/Missing.md\"\n" +
			"- alert: WrongTitle\n  annotations:\n    runbook_url: https://example.com/repo/blob/main/docs/runbooks/WrongTitle.md\n" +
			"- alert: Old\n  annotations:\n    runbook_url: https://example.com/repo/blob/main/README.md#old\n",
	})
	n, problems, err := CheckRunbookURLs(root, "deploy")
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Errorf("%d runbook URLs found, want 4", n)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		"deploy/alerts.yaml:6: runbook_url https://example.com/repo/blob/main/docs/runbooks/Missing.md names no page: docs/runbooks/Missing.md does not exist",
		`deploy/alerts.yaml:9: runbook_url https://example.com/repo/blob/main/docs/runbooks/WrongTitle.md: docs/runbooks/WrongTitle.md does not start with the heading "# WrongTitle"`,
		"deploy/alerts.yaml:12: runbook_url https://example.com/repo/blob/main/README.md#old does not end in /docs/runbooks/<alert>.md",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
