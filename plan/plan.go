package plan

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/unavailability"
)

// Input is what is planned: a strategy over a range of replica counts, for pods of
// one set of requests.
type Input struct {
	Strategy *strategy.Strategy
	// Replicas and MaxReplicas bound the range (an HPA's min and max); equal for a
	// fixed count.
	Replicas, MaxReplicas int
	// Requests are one pod's resource requests.
	Requests corev1.ResourceList
	// Placed counts, per term, the pods a live workload already runs there: they are
	// inside the capacity already used, so only the rest of the target needs room.
	Placed []int
}

// Capacity is the cluster as the plan sees it.
type Capacity struct {
	Matcher    *karpenter.Matcher
	NodePools  []*karpv1.NodePool
	NodeGroups []nodegroups.Group
	// Nodes give the pods per node of node groups, and tell terms that plain nodes serve.
	Nodes []corev1.Node
	// Unavailable are the terms the convergence loop has marked unavailable for the
	// live workload's revision, by 0-based term.
	Unavailable map[int]unavailability.TermState
	// Unseen says what could not be read, and what that leaves out.
	Unseen []string
}

// Result is the plan: the `plan --cluster` document.
type Result struct {
	Strategy    string            `json:"strategy"`
	Replicas    int               `json:"replicas"`
	MaxReplicas int               `json:"maxReplicas"`
	Requests    map[string]string `json:"requests"`
	Terms       []Term            `json:"terms"`
	// Fits is true when every term has room for its target across the range.
	Fits   bool     `json:"fits"`
	Unseen []string `json:"unseen,omitempty"`
	// Cost is set by Project.
	Cost *Totals `json:"cost,omitempty"`
}

// Term is one term's plan.
type Term struct {
	Term   int               `json:"term"`
	Labels map[string]string `json:"labels"`
	// Target and TargetMax are the term's pods at Replicas and MaxReplicas.
	Target    int `json:"target"`
	TargetMax int `json:"targetMax"`
	// Placed are the live workload's pods already on the term.
	Placed      int                 `json:"placed"`
	NodePools   []PoolRoom          `json:"nodePools"`
	NodeGroups  []GroupRoom         `json:"nodeGroups"`
	Nodes       int                 `json:"nodes,omitempty"`
	Tolerations []corev1.Toleration `json:"tolerations"`
	// Room is how many more pods the term's capacity has room for; Unlimited when some
	// serving NodePool has no limit that bounds these pods; RoomUnknown when a serving
	// node group or plain node has room that cannot be counted in pods.
	Room        int  `json:"room"`
	Unlimited   bool `json:"unlimited"`
	RoomUnknown bool `json:"roomUnknown,omitempty"`
	// UnavailableUntil and UnavailableReason are set while the convergence loop has
	// the term marked unavailable (RFC 3339).
	UnavailableUntil  string `json:"unavailableUntil,omitempty"`
	UnavailableReason string `json:"unavailableReason,omitempty"`
	// ShortAt is the first replica count at which the term's target exceeds its room
	// (0: never, up to MaxReplicas).
	ShortAt int `json:"shortAt,omitempty"`
	// Short says why, naming the capacity that runs out.
	Short string `json:"short,omitempty"`
	Fits  bool   `json:"fits"`
	// Cost is set by Project.
	Cost *Projection `json:"cost,omitempty"`
}

// PoolRoom is a serving NodePool and its headroom.
type PoolRoom struct {
	Name string `json:"name"`
	karpenter.Headroom
}

// GroupRoom is a serving node group and its headroom: free nodes (max minus desired
// size) times the pods of these requests one of its nodes holds (0 when unknown: no
// node of the group to measure).
type GroupRoom struct {
	Name        string `json:"name"`
	FreeNodes   int    `json:"freeNodes"`
	PodsPerNode int    `json:"podsPerNode"`
	Pods        int    `json:"pods"`
}

// Compute builds the plan of in over c.
func Compute(in Input, c Capacity) Result {
	s := in.Strategy
	r := Result{Strategy: s.String(), Replicas: in.Replicas, MaxReplicas: in.MaxReplicas, Requests: map[string]string{}, Fits: true, Unseen: c.Unseen}
	for name, q := range in.Requests {
		r.Requests[string(name)] = q.String()
	}
	if c.Matcher == nil {
		c.Matcher = karpenter.NewMatcher()
	}
	target, targetMax := s.Target(in.Replicas), s.Target(in.MaxReplicas)
	for i, t := range s.Terms {
		term := serving(c, t.LabelMap(), in.Requests)
		term.Term, term.Labels, term.Target, term.TargetMax = i+1, t.LabelMap(), target[i], targetMax[i]
		if i < len(in.Placed) {
			term.Placed = in.Placed[i]
		}
		if u, ok := c.Unavailable[i]; ok {
			term.UnavailableUntil, term.UnavailableReason = u.Until.UTC().Format(time.RFC3339), u.Reason
		}
		r.Terms = append(r.Terms, term)
	}
	shortAt(s, in.MaxReplicas, r.Terms)
	for i := range r.Terms {
		t := &r.Terms[i]
		t.Fits = t.ShortAt == 0
		if !t.Fits {
			r.Fits = false
			t.Short = shortReason(t)
		}
	}
	return r
}

// serving fills a term's capacity: the NodePools and node groups that serve its labels,
// their room in pods of requests, and the tolerations a pod sent there gets.
func serving(c Capacity, labels map[string]string, requests corev1.ResourceList) Term {
	t := Term{NodePools: []PoolRoom{}, NodeGroups: []GroupRoom{}}
	var sources []karpenter.Source
	pools, groups := map[string]bool{}, map[string]bool{}
	for _, np := range c.NodePools {
		if !karpenter.NodePoolUsable(np) || c.Matcher.NodePool(np, labels) != nil {
			continue
		}
		pools[np.Name] = true
		h := karpenter.NodePoolHeadroom(np, requests)
		t.NodePools = append(t.NodePools, PoolRoom{Name: np.Name, Headroom: h})
		t.Unlimited = t.Unlimited || h.Unlimited
		t.Room += h.Pods
		sources = append(sources, karpenter.Source{Kind: karpenter.KindNodePool, Name: np.Name, Taints: np.Spec.Template.Spec.Taints})
	}
	for _, g := range c.NodeGroups {
		if !g.Usable() || c.Matcher.NodeGroup(g, labels) != nil {
			continue
		}
		groups[g.Name] = true
		room := GroupRoom{Name: g.Name, FreeNodes: g.Size.Headroom(), PodsPerNode: podsPerNode(c.Nodes, g.Name, requests)}
		room.Pods = room.FreeNodes * room.PodsPerNode
		t.RoomUnknown = t.RoomUnknown || (room.FreeNodes > 0 && room.PodsPerNode == 0)
		t.NodeGroups = append(t.NodeGroups, room)
		t.Room += room.Pods
		sources = append(sources, karpenter.Source{Kind: karpenter.KindNodeGroup, Name: g.Name, Taints: g.Taints})
	}
	for i := range c.Nodes {
		n := &c.Nodes[i]
		if pools[n.Labels[karpv1.NodePoolLabelKey]] || groups[n.Labels[nodegroups.LabelNodeGroup]] || c.Matcher.Node(n.Labels, labels) != nil {
			continue
		}
		t.Nodes++
		t.RoomUnknown = true
	}
	t.Tolerations = karpenter.TolerationsFor(sources)
	if t.Tolerations == nil {
		t.Tolerations = []corev1.Toleration{}
	}
	return t
}

// podsPerNode is how many pods of requests the smallest node of the group holds (0 when
// the group has no node, or the pods request nothing the node reports).
func podsPerNode(nodes []corev1.Node, group string, requests corev1.ResourceList) int {
	best := 0
	for i := range nodes {
		n := &nodes[i]
		if n.Labels[nodegroups.LabelNodeGroup] != group {
			continue
		}
		if fit := PodsFit(n.Status.Allocatable, requests); fit > 0 && (best == 0 || fit < best) {
			best = fit
		}
	}
	return best
}

// PodsFit is how many pods of requests fit in allocatable, bounded by its pod count;
// 0 when nothing bounds it.
func PodsFit(allocatable, requests corev1.ResourceList) int {
	fit := -1
	if p, ok := allocatable[corev1.ResourcePods]; ok {
		fit = int(p.Value())
	}
	for name, req := range requests {
		have, ok := allocatable[name]
		if !ok || req.Sign() <= 0 {
			continue
		}
		if n := int(have.MilliValue() / req.MilliValue()); fit < 0 || n < fit {
			fit = n
		}
	}
	return max(fit, 0)
}

// shortAt walks the seat sequence up to maxReplicas and records, per term, the first
// replica count whose target exceeds what is placed plus its room.
func shortAt(s *strategy.Strategy, maxReplicas int, terms []Term) {
	counts := make([]int, len(terms))
	left := 0
	for _, t := range terms {
		if !t.Unlimited && !t.RoomUnknown {
			left++
		}
	}
	seq := s.Sequence()
	for n := 1; n <= maxReplicas && left > 0; n++ {
		i := seq.Next()
		counts[i]++
		t := &terms[i]
		if t.ShortAt == 0 && !t.Unlimited && !t.RoomUnknown && counts[i]-t.Placed > t.Room {
			t.ShortAt = n
			left--
		}
	}
}

// shortReason says what a short term needs and what its capacity has room for.
func shortReason(t *Term) string {
	msg := fmt.Sprintf("needs %d more pods", t.Room+1)
	if t.Placed > 0 {
		msg += fmt.Sprintf(" beyond its %d placed", t.Placed)
	}
	if len(t.NodePools) == 0 && len(t.NodeGroups) == 0 {
		return msg + "; no NodePool or node group serves the term"
	}
	var parts []string
	for _, p := range t.NodePools {
		if p.Left != "" {
			parts = append(parts, fmt.Sprintf("NodePool %s has room for %d more pods (%s %s left under its limit)", p.Name, p.Pods, p.Bound, p.Left))
		} else {
			parts = append(parts, fmt.Sprintf("NodePool %s has room for %d more pods", p.Name, p.Pods))
		}
	}
	for _, g := range t.NodeGroups {
		parts = append(parts, fmt.Sprintf("node group %s has room for %d more pods (%d free nodes)", g.Name, g.Pods, g.FreeNodes))
	}
	sort.Strings(parts)
	return msg + "; " + strings.Join(parts, "; ")
}
