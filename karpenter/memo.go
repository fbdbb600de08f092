package karpenter

import (
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

// maxMemoTerms bounds the remembered answers: terms come from users' annotations,
// so their number is not ours to bound. When full, the memo starts over.
const maxMemoTerms = 1024

// memoGeneration is the state of the capacity an answer was computed from.
type memoGeneration struct{ capacity, groups uint64 }

// tolerationsAnswer is what Tolerations returns for a term.
type tolerationsAnswer struct {
	tolerations []corev1.Toleration // shared: callers get a copy
	served      bool
	arches      []string // shared: callers get a copy
}

// tolerationsMemo remembers Tolerations' answers computed at one generation. An
// answer computed while the capacity changed may be stored under the older
// generation; the next lookup sees the newer one and drops it.
type tolerationsMemo struct {
	mu      sync.Mutex
	gen     memoGeneration
	answers map[string]tolerationsAnswer
}

func (m *tolerationsMemo) get(key string, gen memoGeneration) (tolerationsAnswer, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gen != gen {
		m.gen, m.answers = gen, nil
	}
	a, ok := m.answers[key]
	return a, ok
}

func (m *tolerationsMemo) put(key string, gen memoGeneration, a tolerationsAnswer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gen != gen {
		return // computed from an older state than the memo's
	}
	if m.answers == nil || len(m.answers) >= maxMemoTerms {
		m.answers = make(map[string]tolerationsAnswer)
	}
	m.answers[key] = a
}

// selectorKey is a canonical string of a node selector (or a term's labels): its
// labels sorted by key, each key and value prefixed by its length. The webhook sees a
// pod before the API server validates it, so keys and values may hold any character;
// the lengths keep distinct selectors distinct.
func selectorKey(selector map[string]string) string {
	keys := make([]string, 0, len(selector))
	for k := range selector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		for _, s := range [2]string{k, selector[k]} {
			b.WriteString(strconv.Itoa(len(s)))
			b.WriteByte(':')
			b.WriteString(s)
		}
	}
	return b.String()
}

// nodeMatters reports whether a Node update can change what serves a term: its
// labels, taints or usability (Ready, cordoned, deleting), not a heartbeat.
func nodeMatters(old, cur interface{}) bool {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := cur.(*corev1.Node)
	if !ok1 || !ok2 {
		return true
	}
	return !maps.Equal(o.Labels, n.Labels) || !equality.Semantic.DeepEqual(o.Spec.Taints, n.Spec.Taints) ||
		nodeUsable(o) != nodeUsable(n)
}

// nodePoolMatters reports whether a NodePool update can change what serves a term:
// its template (labels, requirements, node class, taints) or usability, not the
// resource counts Karpenter keeps in its status.
func nodePoolMatters(old, cur interface{}) bool {
	o, ok1 := old.(*karpv1.NodePool)
	n, ok2 := cur.(*karpv1.NodePool)
	if !ok1 || !ok2 {
		return true
	}
	return !equality.Semantic.DeepEqual(o.Spec.Template, n.Spec.Template) || nodePoolUsable(o) != nodePoolUsable(n)
}
