package strategy

import (
	"fmt"
	"sort"
	"strings"
)

// Closest returns the candidate nearest to word by edit distance (a letter added,
// dropped, changed, or two swapped), when it is near enough to be the likely intent:
// at most one edit in four letters, and at most three. "" when none is.
func Closest(word string, candidates []string) string {
	limit := min(3, max(1, len(word)/4)) + 1
	best, bestD := "", limit
	for _, c := range candidates {
		if c == word {
			return ""
		}
		// Ties go to the first by name, so the hint does not depend on the order.
		if d := editDistance(word, c, limit); d < bestD || (d == bestD && d < limit && c < best) {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance of a and b, or limit when it
// is at least limit (the rows stop early: keys are compared with hundreds of others).
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d >= limit || -d >= limit {
		return limit
	}
	prev2, prev, cur := make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
			rowMin = min(rowMin, cur[j])
		}
		if rowMin >= limit {
			return limit
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return min(prev[len(b)], limit)
}

// userKeys are the annotation keys a user writes to choose a strategy and when its
// moves happen.
var userKeys = []string{AnnotationStrategy, AnnotationStrategyAlias, AnnotationOptIn, AnnotationMoveWindow, AnnotationMinFallbackStay, AnnotationMoveJobPods}

// LookalikeKeys warns about the annotation keys of obj that look like a key a user
// writes (userKeys) but are not one: a different case, a prefix, or a typo such as CustomPodSchedulingStrategy.
// Such a key is ignored, so the workload would silently run without its strategy.
func LookalikeKeys(obj AnnotatedObject) []string {
	var out []string
	for key := range obj.Annotations {
		if isUserKey(key) {
			continue
		}
		if want := lookalike(key); want != "" {
			out = append(out, fmt.Sprintf("%s: annotation %q is not read; did you mean %q?", obj.Name, key, want))
		}
	}
	sort.Strings(out)
	return out
}

func isUserKey(key string) bool {
	for _, k := range userKeys {
		if key == k {
			return true
		}
	}
	return false
}

// lookalike is the user key that key is likely meant to be, or "".
func lookalike(key string) string {
	name := key
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		name = key[i+1:]
	}
	folded := fold(name)
	for _, k := range userKeys {
		want := fold(k[strings.LastIndexByte(k, '/')+1:]) // the name, as for key
		if folded == want || editDistance(folded, want, 4) < 4 {
			return k
		}
	}
	return ""
}

// fold lower-cases s and drops its separators, so spellings of one name compare equal.
func fold(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '-', '_', '.':
			return -1
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}
