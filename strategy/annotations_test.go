package strategy

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTermOfPod(t *testing.T) {
	s, err := Parse("cap=od,base=1:cap=spot,zone=a")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		selector map[string]string
		term     string
		want     int
	}{
		{"selector of term 1", map[string]string{"cap": "od", "other": "x"}, "", 0},
		{"selector of term 2", map[string]string{"cap": "spot", "zone": "a"}, "1", 1},
		{"part of term 2: the annotation decides", map[string]string{"cap": "spot"}, "2", 1},
		{"no selector, bad annotation", nil, "3", -1},
		{"nothing", nil, "", -1},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationTerm: tc.term}}, Spec: corev1.PodSpec{NodeSelector: tc.selector}}
		if got := TermOf(s, pod); got != tc.want {
			t.Errorf("%s: TermOf = %d, want %d", tc.name, got, tc.want)
		}
	}
	// A term contained in a later one: the recorded term decides while it selects the pod.
	nested, err := Parse("a=1:a=1,b=2")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		selector map[string]string
		term     string
		want     int
	}{
		{map[string]string{"a": "1", "b": "2"}, "2", 1},
		{map[string]string{"a": "1"}, "1", 0},
		{map[string]string{"a": "1", "b": "2"}, "", 0}, // no record: the first term that selects it
		{map[string]string{"a": "1"}, "2", 0},          // term 2 does not select it: the selector wins
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationTerm: tc.term}}, Spec: corev1.PodSpec{NodeSelector: tc.selector}}
		if got := TermOf(nested, pod); got != tc.want {
			t.Errorf("a=1:a=1,b=2, selector %v, term annotation %q: TermOf = %d, want %d", tc.selector, tc.term, got, tc.want)
		}
	}
	if !s.Terms[1].SelectedBy(map[string]string{"zone": "a", "cap": "spot"}) || s.Terms[1].SelectedBy(map[string]string{"zone": "b", "cap": "spot"}) {
		t.Error("SelectedBy disagrees with the term's labels")
	}
}
