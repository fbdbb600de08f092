package doccheck

import (
	"bufio"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// Problem is one broken reference: where it is and what is wrong.
type Problem struct {
	File string // relative to the root, with forward slashes
	Line int
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

var (
	headingRE   = regexp.MustCompile(`^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$`)
	inlineLink  = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	refLinkDef  = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	codeSpan    = regexp.MustCompile("`+[^`]*`+")
	linkText    = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	schemeRE    = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
	runbookURL  = regexp.MustCompile(`runbook_url:\s*["']?([^"'\s]+)`)
	runbookPage = regexp.MustCompile(`/docs/runbooks/([^/]+\.md)$`)
	sourceLine  = regexp.MustCompile(`^L\d+(-L\d+)?$`)
)

// Anchor is the anchor GitHub gives a heading: the heading's text (inline code and
// link text kept, markup dropped) lowercased, spaces turned into '-', and every other
// character that is not a letter, a digit, '-' or '_' dropped.
func Anchor(heading string) string {
	text := linkText.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// line is one line of a Markdown file outside fenced code blocks.
type line struct {
	n    int
	text string
}

// proseLines reads a Markdown file's lines that are not inside fenced code blocks.
func proseLines(file string) ([]line, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	defer f.Close()
	var out []line
	fence := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		t := sc.Text()
		trimmed := strings.TrimLeft(t, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == "" {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		out = append(out, line{n, t})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	return out, nil
}

// Anchors lists the anchors of a Markdown file's headings; a repeated heading gets
// "-1", "-2", ... as on GitHub.
func Anchors(file string) (map[string]bool, error) {
	lines, err := proseLines(file)
	if err != nil {
		return nil, err
	}
	anchors, seen := map[string]bool{}, map[string]int{}
	for _, l := range lines {
		m := headingRE.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		a := Anchor(m[2])
		if k := seen[a]; k > 0 {
			seen[a] = k + 1
			a = fmt.Sprintf("%s-%d", a, k)
		} else {
			seen[a] = 1
		}
		anchors[a] = true
	}
	return anchors, nil
}

// MarkdownFiles lists the Markdown files under root, relative to it, leaving out hidden
// directories and vendor/.
func MarkdownFiles(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && p != root && (strings.HasPrefix(name, ".") || name == "vendor" || name == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing Markdown files under %s: %w", root, err)
	}
	return files, nil
}

// CheckLinks checks the relative links of files (Markdown, relative to root): each must
// name a file or directory inside root, and an anchor must name a heading of the
// Markdown page it points into (or of the file itself for "#anchor").
func CheckLinks(root string, files []string) ([]Problem, error) {
	var problems []Problem
	anchorCache := map[string]map[string]bool{}
	anchorsOf := func(rel string) (map[string]bool, error) {
		if a, ok := anchorCache[rel]; ok {
			return a, nil
		}
		a, err := Anchors(filepath.Join(root, filepath.FromSlash(rel)))
		anchorCache[rel] = a
		return a, err
	}
	for _, file := range files {
		lines, err := proseLines(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			return nil, err
		}
		for _, l := range lines {
			text := codeSpan.ReplaceAllString(l.text, "``")
			var targets []string
			for _, m := range inlineLink.FindAllStringSubmatch(text, -1) {
				targets = append(targets, m[1])
			}
			if m := refLinkDef.FindStringSubmatch(text); m != nil {
				targets = append(targets, m[1])
			}
			for _, target := range targets {
				if msg := checkTarget(root, file, target, anchorsOf); msg != "" {
					problems = append(problems, Problem{file, l.n, msg})
				}
			}
		}
	}
	return problems, nil
}

// checkTarget says what is wrong with one link target of file, or "".
func checkTarget(root, file, target string, anchorsOf func(string) (map[string]bool, error)) string {
	if target == "" {
		return "empty link"
	}
	if schemeRE.MatchString(target) || strings.HasPrefix(target, "//") {
		return "" // another site: not checked here
	}
	p, anchor, _ := strings.Cut(target, "#")
	p, err := url.PathUnescape(p)
	if err != nil {
		return fmt.Sprintf("link %q: %v", target, err)
	}
	rel := file
	if p != "" {
		if strings.HasPrefix(p, "/") {
			rel = path.Clean(strings.TrimPrefix(p, "/"))
		} else {
			rel = path.Clean(path.Join(path.Dir(file), p))
		}
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Sprintf("link %q leaves the repository", target)
		}
		st, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return fmt.Sprintf("link %q: no file %s", target, rel)
		}
		if anchor != "" && st.IsDir() {
			return fmt.Sprintf("link %q: an anchor on a directory", target)
		}
	}
	if anchor == "" {
		return ""
	}
	if !strings.HasSuffix(rel, ".md") {
		if sourceLine.MatchString(anchor) {
			return "" // a line of a source file
		}
		return fmt.Sprintf("link %q: an anchor into %s, which is not Markdown", target, rel)
	}
	anchors, err := anchorsOf(rel)
	if err != nil {
		return fmt.Sprintf("link %q: %v", target, err)
	}
	if !anchors[strings.ToLower(anchor)] {
		return fmt.Sprintf("link %q: %s has no heading with the anchor #%s", target, rel, anchor)
	}
	return ""
}

// isYAML reports whether a file holds YAML (alert rules, their tests, chart templates).
func isYAML(name string) bool {
	return strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || strings.HasSuffix(name, ".tpl")
}

// CheckRunbookURLs checks every runbook_url in the YAML files under dir (relative to root):
// each must end in /docs/runbooks/<page>.md, and root's docs/runbooks/<page>.md must
// exist and start with a heading naming the page (the alert). Lines of Helm templates
// are left to their rendered copies.
func CheckRunbookURLs(root, dir string) (urls int, problems []Problem, err error) {
	err = filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !isYAML(d.Name()) {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("reading %s: %w", p, err)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		for i, l := range strings.Split(string(data), "\n") {
			m := runbookURL.FindStringSubmatch(l)
			if m == nil || strings.HasPrefix(m[1], "{{") {
				// A Helm template's line: its rendering (deploy/manifests) is checked.
				continue
			}
			urls++
			if msg := checkRunbook(root, m[1]); msg != "" {
				problems = append(problems, Problem{filepath.ToSlash(rel), i + 1, msg})
			}
		}
		return nil
	})
	if err != nil {
		return 0, nil, fmt.Errorf("reading runbook URLs under %s: %w", dir, err)
	}
	return urls, problems, nil
}

// checkRunbook says what is wrong with one runbook URL, or "".
func checkRunbook(root, u string) string {
	m := runbookPage.FindStringSubmatch(u)
	if m == nil {
		return fmt.Sprintf("runbook_url %s does not end in /docs/runbooks/<alert>.md", u)
	}
	page := filepath.Join(root, "docs", "runbooks", m[1])
	data, err := os.ReadFile(page)
	if err != nil {
		return fmt.Sprintf("runbook_url %s names no page: docs/runbooks/%s does not exist", u, m[1])
	}
	alert := strings.TrimSuffix(m[1], ".md")
	first, _, _ := strings.Cut(string(data), "\n")
	if strings.TrimSpace(first) != "# "+alert {
		return fmt.Sprintf("runbook_url %s: docs/runbooks/%s does not start with the heading \"# %s\"", u, m[1], alert)
	}
	return ""
}
