package placement

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// Availability tells which terms of a workload revision cannot get capacity now (their
// seats go to the fallback term until then): the convergence loop records them in the
// API server, every replica reads them through an informer.
type Availability interface {
	// Unavailable returns the 0-based terms of revision that are unavailable now, each
	// with why and until when (for messages); nil when every term is available.
	Unavailable(revision types.UID) map[int]string
}

// fallbackPlacement is where a seat goes while terms are unavailable.
type fallbackPlacement struct {
	term     int    // 0-based term the pod is placed on
	from     int    // 0-based own term of the seat when placed elsewhere, else -1
	warning  string // said to the user: the fallback, or why there is none
	fallback bool
}

// fallbackOf returns the term seat is placed on: its own term, or, while that term is
// unavailable (in gone), the term the fallback rule gives (strategy.FallbackTerm).
func fallbackOf(s *strategy.Strategy, w *clusterview.Workload, seat, own int, gone map[int]string) fallbackPlacement {
	p := fallbackPlacement{term: own, from: -1}
	if _, ok := gone[own]; !ok {
		return p
	}
	term, fallback, stuck := s.FallbackTerm(seat, func(t int) bool { _, ok := gone[t]; return ok })
	switch {
	case stuck || term < 0:
		p.warning = fmt.Sprintf("term %d (%s) of %s is unavailable (%s) and no other term with a weight or a base is available: the pod is placed on it anyway",
			own+1, s.Terms[own].LabelString(), w.Describe(), gone[own])
	case fallback:
		p.term, p.from, p.fallback = term, own, true
		p.warning = fmt.Sprintf("term %d (%s) of %s is unavailable (%s): seat %d placed on term %d (%s) until it is back",
			own+1, s.Terms[own].LabelString(), w.Describe(), gone[own], seat, term+1, s.Terms[term].LabelString())
	}
	return p
}
