package strategy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ParseError describes why a strategy is invalid. Term is 1-based and 0 when the fault
// concerns the strategy as a whole; Part is the offending "key=value" part, if any.
type ParseError struct {
	Term   int
	Text   string
	Part   string
	Reason string
}

// Error reads like: term 2 ("spot,weight=x"): weight "x" is not a non-negative integer.
func (e *ParseError) Error() string {
	if e.Term == 0 {
		return "strategy: " + e.Reason
	}
	return fmt.Sprintf("term %d (%q): %s", e.Term, e.Text, e.Reason)
}

// Parse reads a CustomPodScheduleStrategy value. Terms are separated by ':', parts of a
// term by ','; whitespace around parts is ignored. It never panics: every fault comes
// back as a *ParseError naming the term, the part and the reason.
func Parse(raw string) (*Strategy, error) {
	if len(raw) > MaxLength {
		return nil, &ParseError{Reason: fmt.Sprintf("value is %d bytes long; at most %d are accepted", len(raw), MaxLength)}
	}
	if strings.TrimSpace(raw) == "" {
		return nil, &ParseError{Reason: "value is empty"}
	}
	texts := strings.Split(raw, ":")
	if len(texts) > MaxTerms {
		return nil, &ParseError{Reason: fmt.Sprintf("%d terms; at most %d are accepted", len(texts), MaxTerms)}
	}
	s := &Strategy{Terms: make([]Term, 0, len(texts))}
	for i, text := range texts {
		term, err := parseTerm(strings.TrimSpace(text))
		if err != nil {
			err.Term, err.Text = i+1, strings.TrimSpace(text)
			return nil, err
		}
		s.Terms = append(s.Terms, term)
	}
	if s.totalWeight() == 0 {
		return nil, &ParseError{Reason: "every term has weight 0, so pods past the bases would have nowhere to go; give at least one term a weight"}
	}
	if err := s.checkOverlaps(texts); err != nil {
		return nil, err
	}
	s.checkWellKnown()
	s.prefix = &prefixCache{}
	return s, nil
}

// checkOverlaps refuses two terms with the same labels (in any order): nothing could
// tell which of them a pod counts for. A term whose labels contain another's is
// allowed (a pool of the larger set is also one of the smaller) but warned about,
// since a pod of the larger term also matches the smaller one.
func (s *Strategy) checkOverlaps(texts []string) *ParseError {
	for j := range s.Terms {
		for i := range j {
			a, b := s.Terms[i].LabelMap(), s.Terms[j].LabelMap()
			switch {
			case contains(a, b) && contains(b, a):
				return &ParseError{Term: j + 1, Text: strings.TrimSpace(texts[j]),
					Reason: fmt.Sprintf("same node labels as term %d (%s); a pod could not be told to count for one or the other", i+1, s.Terms[i].LabelString())}
			case contains(a, b), contains(b, a):
				small, large := i, j
				if contains(a, b) {
					small, large = j, i
				}
				s.Warnings = append(s.Warnings, fmt.Sprintf("term %d (%s) selects every label of term %d (%s): its pods also match term %d, so a report cannot tell which term they count for",
					large+1, s.Terms[large].LabelString(), small+1, s.Terms[small].LabelString(), small+1))
			}
		}
	}
	return nil
}

// wellKnownValues are the values that well-known node labels take. Another value is
// accepted with a warning: it is more likely a typo than a value of one's own, but a
// NodePool or node group may set any value it likes.
var wellKnownValues = map[string][]string{
	"karpenter.sh/capacity-type":     {"spot", "on-demand", "reserved"},
	"eks.amazonaws.com/capacityType": {"ON_DEMAND", "SPOT", "CAPACITY_BLOCK"},
	"kubernetes.io/arch":             {"amd64", "arm64", "arm", "ppc64le", "s390x"},
	"kubernetes.io/os":               {"linux", "windows"},
}

// checkWellKnown warns about a well-known label with a value it does not usually take.
func (s *Strategy) checkWellKnown() {
	for i, t := range s.Terms {
		for _, l := range t.Labels {
			known, ok := wellKnownValues[l.Key]
			if !ok {
				continue
			}
			for _, v := range l.Values() {
				if slices.Contains(known, v) {
					continue
				}
				s.Warnings = append(s.Warnings, fmt.Sprintf("term %d (%s): %s=%s is not one of the values it usually takes (%s); accepted, in case your NodePools or nodes set it, but check for a typo",
					i+1, t.LabelString(), l.Key, v, strings.Join(known, ", ")))
			}
		}
	}
}

// contains reports whether every label of small is in big (a set equal to a set in
// any order).
func contains(big, small map[string]string) bool {
	for k, v := range small {
		if cur, ok := big[k]; !ok || !sameValues(cur, v) {
			return false
		}
	}
	return true
}

// sameValues reports whether two term values (single or set) hold the same values.
func sameValues(a, b string) bool {
	if a == b {
		return true
	}
	as, bs := SplitValues(a), SplitValues(b)
	slices.Sort(as)
	slices.Sort(bs)
	return slices.Equal(as, bs)
}

// parseTerm parses one term; the caller fills in the term number and text of the error.
func parseTerm(text string) (Term, *ParseError) {
	if text == "" {
		return Term{}, &ParseError{Reason: "term is empty (two ':' in a row, or a ':' at either end?)"}
	}
	var (
		t                  Term
		haveBase, haveWght bool
		seen               = map[string]bool{}
	)
	for _, part := range strings.Split(text, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return Term{}, &ParseError{Reason: "empty part (two ',' in a row, or a ',' at either end?)"}
		}
		key, value, ok := strings.Cut(part, "=")
		if !ok {
			return Term{}, &ParseError{Part: part, Reason: fmt.Sprintf("part %q is not key=value", part)}
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		switch lower := strings.ToLower(key); {
		case key == keyBase || key == keyWeight:
			if (key == keyBase && haveBase) || (key == keyWeight && haveWght) {
				return Term{}, &ParseError{Part: part, Reason: fmt.Sprintf("%s is given twice", key)}
			}
			bound := MaxBase
			if key == keyWeight {
				bound = MaxWeight
			}
			n, err := parseBounded(key, value, bound)
			if err != nil {
				err.Part = part
				return Term{}, err
			}
			if key == keyBase {
				t.Base, haveBase = n, true
			} else {
				t.Weight, haveWght = n, true
			}
		case lower == keyBase || lower == keyWeight:
			// "Base=2" would otherwise become a node label nothing carries and strand pods.
			return Term{}, &ParseError{Part: part, Reason: fmt.Sprintf("%q is reserved and must be written in lower case", lower)}
		default:
			if errs := validation.IsQualifiedName(key); len(errs) > 0 {
				return Term{}, &ParseError{Part: part, Reason: fmt.Sprintf("label key %q is invalid: %s", key, errs[0])}
			}
			value, err := parseValues(key, value)
			if err != nil {
				err.Part = part
				return Term{}, err
			}
			if seen[key] {
				return Term{}, &ParseError{Part: part, Reason: fmt.Sprintf("label key %q is given twice", key)}
			}
			seen[key] = true
			t.Labels = append(t.Labels, Label{Key: key, Value: value})
		}
	}
	if len(t.Labels) == 0 {
		return Term{}, &ParseError{Reason: "term has no node label (key=value besides base and weight)"}
	}
	if !haveWght {
		// A term with a base but no weight takes only its base: "on-demand,base=2:spot".
		if haveBase {
			t.Weight = 0
		} else {
			t.Weight = 1
		}
	}
	return t, nil
}

// parseValues checks a label part's value: one label value, or a set of at least two
// distinct label values separated by '|' (whitespace around each ignored). It returns
// the canonical form, values joined by '|' in annotation order.
func parseValues(key, value string) (string, *ParseError) {
	if !strings.Contains(value, SetSeparator) {
		if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
			return "", &ParseError{Reason: fmt.Sprintf("label value %q of %q is invalid: %s", value, key, errs[0])}
		}
		return value, nil
	}
	values := SplitValues(value)
	for i, v := range values {
		v = strings.TrimSpace(v)
		if v == "" {
			return "", &ParseError{Reason: fmt.Sprintf("set of values %q of %q has an empty value (a '|' at either end, or two in a row?)", value, key)}
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return "", &ParseError{Reason: fmt.Sprintf("label value %q in the set of %q is invalid: %s", v, key, errs[0])}
		}
		if slices.Contains(values[:i], v) {
			return "", &ParseError{Reason: fmt.Sprintf("label value %q is given twice in the set of %q", v, key)}
		}
		values[i] = v
	}
	return strings.Join(values, SetSeparator), nil
}

// parseBounded accepts only plain decimal digits: no sign, no spaces, no hex.
func parseBounded(key, value string, bound int) (int, *ParseError) {
	if value == "" || strings.TrimLeft(value, "0123456789") != "" {
		return 0, &ParseError{Reason: fmt.Sprintf("%s %q is not a non-negative integer", key, value)}
	}
	n, err := strconv.Atoi(value)
	if err != nil || n > bound {
		return 0, &ParseError{Reason: fmt.Sprintf("%s %s is larger than %d", key, value, bound)}
	}
	return n, nil
}

func (s *Strategy) totalWeight() int {
	total := 0
	for _, t := range s.Terms {
		total += t.Weight
	}
	return total
}
