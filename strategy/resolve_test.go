package strategy

import (
	"sync"
	"testing"
)

// Every reader gets one parse per distinct strategy, the same *Strategy, and the
// parser's error for an invalid one; an inactive chain parses nothing.
func TestResolverParsesOnceAndSaysWhere(t *testing.T) {
	const raw = "karpenter.sh/capacity-type=on-demand,base=2:karpenter.sh/capacity-type=spot,weight=3"
	var r Resolver
	var wg sync.WaitGroup
	got := make([]Resolved, 8)
	for i := range got {
		wg.Go(func() {
			got[i] = r.Resolve(AnnotatedObject{Name: "pod template"}, AnnotatedObject{Name: "Deployment shop/web", Annotations: map[string]string{AnnotationStrategy: raw}})
		})
	}
	wg.Wait()
	for _, res := range got {
		if res.Strategy == nil || res.Strategy != got[0].Strategy || res.Err != nil || res.Object != "Deployment shop/web" {
			t.Fatalf("Resolve = %+v, want the one parsed strategy found on the Deployment", res)
		}
	}
	bad := r.Resolve(AnnotatedObject{Name: "pod", Annotations: map[string]string{AnnotationStrategy: "spot,weight=x"}})
	if bad.Strategy != nil || bad.Err == nil || !bad.Active() {
		t.Errorf("an invalid strategy resolved to %+v, want the parser's error", bad)
	}
	off := r.Resolve(AnnotatedObject{Name: "pod", Annotations: map[string]string{AnnotationStrategy: raw, AnnotationOptIn: "false"}})
	if off.Active() || off.Strategy != nil || off.Err != nil {
		t.Errorf("a switched-off strategy resolved to %+v", off)
	}
	if plain := Resolve(AnnotatedObject{Name: "pod", Annotations: map[string]string{AnnotationStrategy: raw}}); plain.Strategy == nil || plain.Strategy.String() != got[0].Strategy.String() {
		t.Errorf("Resolve without a cache = %+v", plain)
	}
}
