package doccheck

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Table returns the rows of the first Markdown table under the heading named section
// (its "## " line) of the page at path, each as its cells with surrounding spaces and
// backticks trimmed; the header and separator rows are left out.
func Table(path, section string) ([][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows [][]string
	in, header := false, true
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			if in && len(rows) > 0 {
				break
			}
			in, header = strings.TrimPrefix(line, "## ") == section, true
			continue
		}
		if !in || !strings.HasPrefix(line, "|") {
			if in && len(rows) > 0 {
				break
			}
			continue
		}
		if header || strings.HasPrefix(line, "|---") {
			header = false
			continue
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
			cells = append(cells, strings.Trim(strings.TrimSpace(c), "`"))
		}
		rows = append(rows, cells)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no table under %q", path, section)
	}
	return rows, nil
}

// Pattern compiles a catalogue message, in which "…" stands for any text, into a
// regular expression that matches a whole message.
func Pattern(msg string) *regexp.Regexp {
	parts := strings.Split(msg, "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("(?s)^" + strings.Join(parts, ".*") + "$")
}
