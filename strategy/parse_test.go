package strategy

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestParseValid(t *testing.T) {
	cases := []struct {
		raw  string
		want []Term
	}{
		{
			raw: "karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3",
			want: []Term{
				{Labels: []Label{{"karpenter.sh/capacity-type", "on-demand"}}, Base: 2, Weight: 1},
				{Labels: []Label{{"karpenter.sh/capacity-type", "spot"}}, Weight: 3},
			},
		},
		{
			// Default weight: 0 with a base, 1 without.
			raw: "capacity=on-demand,base=2:capacity=spot",
			want: []Term{
				{Labels: []Label{{"capacity", "on-demand"}}, Base: 2, Weight: 0},
				{Labels: []Label{{"capacity", "spot"}}, Weight: 1},
			},
		},
		{
			// Whitespace around parts and terms is ignored; labels keep their order.
			raw: "  zone = a , nodesize=big ,weight= 2 :\n pool=x ",
			want: []Term{
				{Labels: []Label{{"zone", "a"}, {"nodesize", "big"}}, Weight: 2},
				{Labels: []Label{{"pool", "x"}}, Weight: 1},
			},
		},
		{
			// An empty label value is a valid Kubernetes label value.
			raw:  "dedicated=,weight=1",
			want: []Term{{Labels: []Label{{"dedicated", ""}}, Weight: 1}},
		},
		{
			raw:  "a=1,base=100000,weight=1000",
			want: []Term{{Labels: []Label{{"a", "1"}}, Base: 100000, Weight: 1000}},
		},
	}
	for _, c := range cases {
		s, err := Parse(c.raw)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.raw, err)
			continue
		}
		if !reflect.DeepEqual(s.Terms, c.want) {
			t.Errorf("Parse(%q) = %+v, want %+v", c.raw, s.Terms, c.want)
		}
		// The canonical form parses back to the same strategy.
		again, err := Parse(s.String())
		if err != nil || !reflect.DeepEqual(again.Terms, s.Terms) {
			t.Errorf("round trip of %q via %q: %+v, %v", c.raw, s.String(), again, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		raw      string
		term     int
		contains string
	}{
		{"", 0, "empty"},
		{"   ", 0, "empty"},
		{":", 1, "term is empty"},
		{"::", 1, "term is empty"},
		{"a=1:", 2, "term is empty"},
		{"nodesize", 1, `part "nodesize" is not key=value`},
		{"a=1,,b=2", 1, "empty part"},
		{"a=1,", 1, "empty part"},
		{"a=1,base=-1", 1, `base "-1" is not a non-negative integer`},
		{"a=1:spot=1,weight=x", 2, `weight "x" is not a non-negative integer`},
		{"a=1,weight=1.5", 1, "not a non-negative integer"},
		{"a=1,weight=+1", 1, "not a non-negative integer"},
		{"a=1,weight=0x10", 1, "not a non-negative integer"},
		{"a=1,weight=", 1, "not a non-negative integer"},
		{"a=1,base=100001", 1, "larger than 100000"},
		{"a=1,weight=1001", 1, "larger than 1000"},
		{"a=1,weight=99999999999999999999999", 1, "larger than 1000"},
		{"a=1,base=1,base=2", 1, "base is given twice"},
		{"a=1,weight=1,weight=2", 1, "weight is given twice"},
		{"a=1,a=2", 1, `label key "a" is given twice`},
		{"a=1,Base=2", 1, `"base" is reserved`},
		{"a=1,WEIGHT=2", 1, `"weight" is reserved`},
		{"base=1,weight=1", 1, "no node label"},
		{"bad key=1", 1, `label key "bad key" is invalid`},
		{"/x=1", 1, "label key"},
		{"a=has space", 1, `label value "has space"`},
		{"a=" + strings.Repeat("v", 64), 1, "label value"},
		{"nodesizé=1", 1, "label key"},
		{"a=spöt", 1, "label value"},
		{"a=1,base=1:b=1,base=2", 0, "every term has weight 0"},
		{"a=1,weight=0", 0, "every term has weight 0"},
		{strings.Repeat("a=1:", 20) + "a=1", 0, "21 terms"},
		{strings.Repeat("x", MaxLength+1), 0, "bytes long"},
	}
	for _, c := range cases {
		s, err := Parse(c.raw)
		if err == nil {
			t.Errorf("Parse(%q) = %v, want an error", c.raw, s)
			continue
		}
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("Parse(%q): error %T is not a *ParseError", c.raw, err)
			continue
		}
		if pe.Term != c.term {
			t.Errorf("Parse(%q): error names term %d, want %d (%v)", c.raw, pe.Term, c.term, err)
		}
		if !strings.Contains(err.Error(), c.contains) {
			t.Errorf("Parse(%q): error %q does not mention %q", c.raw, err, c.contains)
		}
	}
}

func TestParseErrorMessage(t *testing.T) {
	_, err := Parse("capacity=on-demand,base=1:spot=1,weight=x")
	want := `term 2 ("spot=1,weight=x"): weight "x" is not a non-negative integer`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}

func TestFind(t *testing.T) {
	pod := func(a map[string]string) AnnotatedObject { return AnnotatedObject{Name: "pod", Annotations: a} }
	deploy := func(a map[string]string) AnnotatedObject {
		return AnnotatedObject{Name: "Deployment ns/web", Annotations: a}
	}

	src := Find(pod(nil), deploy(map[string]string{AnnotationStrategy: "a=1"}))
	if !src.Active() || src.Raw != "a=1" || src.Object != "Deployment ns/web" {
		t.Errorf("strategy on the Deployment: %+v", src)
	}
	src = Find(pod(map[string]string{AnnotationStrategyAlias: "b=1"}), deploy(map[string]string{AnnotationStrategy: "a=1"}))
	if src.Raw != "b=1" || src.Key != AnnotationStrategyAlias || src.Object != "pod" {
		t.Errorf("the pod's own (alias) annotation wins: %+v", src)
	}
	src = Find(pod(nil), deploy(map[string]string{AnnotationStrategy: "a=1", AnnotationOptIn: "false"}))
	if src.Active() || !src.Disabled {
		t.Errorf("explicit false turns it off: %+v", src)
	}
	src = Find(pod(map[string]string{AnnotationStrategy: "a=1"}), deploy(map[string]string{AnnotationOptIn: "False"}))
	if src.Active() {
		t.Errorf("false anywhere in the chain turns it off: %+v", src)
	}
	src = Find(pod(nil), deploy(map[string]string{AnnotationStrategy: "a=1", AnnotationOptIn: "true"}))
	if !src.Active() {
		t.Errorf("opt-in true: %+v", src)
	}
	src = Find(pod(nil), deploy(map[string]string{AnnotationStrategy: "a=1", AnnotationOptIn: "yes please"}))
	if !src.Active() || len(src.Warnings) != 1 {
		t.Errorf("unreadable opt-in is ignored with a warning: %+v", src)
	}
	src = Find(pod(nil), deploy(map[string]string{AnnotationStrategy: "a=1", AnnotationStrategyAlias: "b=1"}))
	if src.Raw != "a=1" || len(src.Warnings) != 1 {
		t.Errorf("both spellings, different: canonical wins with a warning: %+v", src)
	}
	src = Find(pod(map[string]string{AnnotationStrategy: ""}))
	if !src.Active() || src.Raw != "" {
		t.Errorf("an empty annotation is present (and Parse reports it): %+v", src)
	}
	if src = Find(pod(nil), deploy(nil)); src.Present || src.Active() {
		t.Errorf("no strategy: %+v", src)
	}
	if src = Find(pod(nil), deploy(map[string]string{AnnotationStrategy: "a=1"})); src.Origin != OriginAnnotation {
		t.Errorf("a workload's annotation: origin %q, want %q", src.Origin, OriginAnnotation)
	}
	ns := AnnotatedObject{Name: "Namespace ns", Annotations: map[string]string{AnnotationStrategy: "c=1"}, Origin: OriginNamespace}
	if src = Find(pod(nil), deploy(nil), ns); src.Origin != OriginNamespace || src.Raw != "c=1" {
		t.Errorf("the namespace default: %+v", src)
	}
}

// FuzzParse: Parse never panics, and what it accepts is within bounds and round-trips.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3",
		"nodesize=od4vcpu16gb,base=1,weight=0:nodesize=spot4vcpu16gb,weight=1:nodesize=spot8vcpu32gb,weight=1",
		"a=1:b=1:c=1", "", ":", "a", "a=1,,", "a=1,base=-1", "a=1,weight=99999999999999999999", "é=ü",
		"a=1:a=1", "a=1,b=2:b=2,a=1", "a=1:a=1,b=2",
		"karpenter.sh/capacity-type=reserved|on-demand,base=2:karpenter.sh/capacity-type=spot", "a=1|2|3", "a=|", "a=1| 1", "a=1|2:a=2|1",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		s, err := Parse(raw)
		if err != nil {
			if s != nil {
				t.Fatalf("Parse(%q) returned both a strategy and an error", raw)
			}
			return
		}
		if len(s.Terms) == 0 || len(s.Terms) > MaxTerms {
			t.Fatalf("Parse(%q) accepted %d terms", raw, len(s.Terms))
		}
		for _, term := range s.Terms {
			if len(term.Labels) == 0 || term.Base < 0 || term.Base > MaxBase || term.Weight < 0 || term.Weight > MaxWeight {
				t.Fatalf("Parse(%q) accepted an out-of-bounds term %+v", raw, term)
			}
			for _, l := range term.Labels {
				// A set has at least two distinct valid label values, each admitted by it.
				values := l.Values()
				if l.IsSet() != (len(values) > 1) {
					t.Fatalf("Parse(%q): label %+v: IsSet disagrees with its %d values", raw, l, len(values))
				}
				for i, v := range values {
					if l.IsSet() && (v == "" || slices.Contains(values[:i], v)) || len(validation.IsValidLabelValue(v)) > 0 || !l.Admits(v) {
						t.Fatalf("Parse(%q) accepted label %+v with value %q", raw, l, v)
					}
				}
			}
		}
		again, err := Parse(s.String())
		if err != nil || !reflect.DeepEqual(again.Terms, s.Terms) || !reflect.DeepEqual(again.Warnings, s.Warnings) {
			t.Fatalf("canonical form %q of %q does not round-trip: %v", s.String(), raw, err)
		}
		if got := s.Target(50); len(got) != len(s.Terms) {
			t.Fatalf("Target has %d counts for %d terms", len(got), len(s.Terms))
		}
	})
}

// Defect 4: two terms with the same labels (in any order) cannot be told apart.
func TestParseRejectsIdenticalTerms(t *testing.T) {
	cases := []struct{ raw, want string }{
		{"a=1:a=1", `term 2 ("a=1"): same node labels as term 1 (a=1)`},
		{"a=1,b=2:c=3:b=2,a=1", `term 3 ("b=2,a=1"): same node labels as term 1 (a=1,b=2)`},
		{"a=1,base=1:a=1,weight=3", `term 2 ("a=1,weight=3"): same node labels as term 1 (a=1)`},
	}
	for _, c := range cases {
		_, err := Parse(c.raw)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", c.raw, err, c.want)
		}
	}
}

// A well-known label with an unknown value is accepted, with a warning naming it.
func TestParseWarnsOnUnknownWellKnownValues(t *testing.T) {
	s := mustParse(t, "karpenter.sh/capacity-type=on-demand,base=1:karpenter.sh/capacity-type=spotty")
	if len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "term 2 (karpenter.sh/capacity-type=spotty): karpenter.sh/capacity-type=spotty is not one of the values it usually takes (spot, on-demand, reserved)") {
		t.Fatalf("warnings %q, want one about spotty", s.Warnings)
	}
	for _, raw := range []string{
		"karpenter.sh/capacity-type=spot:karpenter.sh/capacity-type=on-demand:karpenter.sh/capacity-type=reserved",
		"eks.amazonaws.com/capacityType=SPOT:eks.amazonaws.com/capacityType=ON_DEMAND",
		"kubernetes.io/arch=arm64:kubernetes.io/arch=amd64",
		"nodesize=anything",
	} {
		if s := mustParse(t, raw); len(s.Warnings) != 0 {
			t.Errorf("%s: warned %q", raw, s.Warnings)
		}
	}
	if s := mustParse(t, "eks.amazonaws.com/capacityType=spot,kubernetes.io/os=linux"); len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "ON_DEMAND, SPOT, CAPACITY_BLOCK") {
		t.Errorf("lower-case spot on the EKS label: warnings %q", s.Warnings)
	}
}

// A term whose labels contain another's is valid, with a warning naming both.
func TestParseWarnsOnContainedTerms(t *testing.T) {
	s := mustParse(t, "a=1:b=2:a=1,b=2")
	want := []string{
		"term 3 (a=1,b=2) selects every label of term 1 (a=1)",
		"term 3 (a=1,b=2) selects every label of term 2 (b=2)",
	}
	if len(s.Warnings) != len(want) {
		t.Fatalf("warnings %q, want %d", s.Warnings, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(s.Warnings[i], w) {
			t.Errorf("warning %q, want it to start with %q", s.Warnings[i], w)
		}
	}
	if s := mustParse(t, "a=1,b=2:a=1,b=3:a=2"); len(s.Warnings) != 0 {
		t.Errorf("disjoint terms warned: %q", s.Warnings)
	}
}
