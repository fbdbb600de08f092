package karpenter

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
)

// LaunchView is what the Catalog knows of the capacity that could be launched for a
// term: the structured half of the answer to "can Karpenter launch a node for this
// pod?" (CannotLaunch), read from Karpenter's objects rather than its Events.
type LaunchView struct {
	// Watching is false while NodePools are not watched (Karpenter not installed, or
	// NodePools off): there is nothing structured to say then.
	Watching bool
	// Pools are the NodePools whose requirements serve the term, usable or not (a pool
	// not Ready or being deleted is here too, and CannotLaunch says so), by name. They
	// are the informer's objects: do not modify.
	Pools []*karpv1.NodePool
	// Incompatible is, when no NodePool serves the term, why the first one cannot
	// (Karpenter's own words from its requirement code, via Matcher.NodePool).
	Incompatible string
	// NodeGroups counts the usable EKS managed node groups that serve the term (they may
	// grow: CannotLaunch says nothing then); Nodes the Ready, schedulable nodes that
	// serve it and that neither a NodePool nor one of those groups launched.
	NodeGroups, Nodes int
}

// LaunchView returns what c knows of the capacity that could be launched for term.
func (c *Catalog) LaunchView(term map[string]string) LaunchView {
	if c.pools == nil || c.poolState.Load() != poolsWatching {
		return LaunchView{}
	}
	var groups []nodegroups.Group
	if c.groups != nil {
		groups = c.groups.Groups()
	}
	var nodes []*corev1.Node
	for _, obj := range c.nodes.GetStore().List() {
		if n, ok := obj.(*corev1.Node); ok {
			nodes = append(nodes, n)
		}
	}
	return launchView(c.matcher, c.nodePools(), groups, nodes, term)
}

// launchView is LaunchView over given objects.
func launchView(m *Matcher, pools []*karpv1.NodePool, groups []nodegroups.Group, nodes []*corev1.Node, term map[string]string) LaunchView {
	v := LaunchView{Watching: true}
	for _, np := range pools {
		if err := m.NodePool(np, term); err != nil {
			if v.Incompatible == "" {
				v.Incompatible = err.Error()
			}
			continue
		}
		v.Pools = append(v.Pools, np)
	}
	if len(v.Pools) > 0 {
		v.Incompatible = ""
	}
	sort.Slice(v.Pools, func(i, j int) bool { return v.Pools[i].Name < v.Pools[j].Name })
	serving := sets.New[string]()
	for _, g := range groups {
		if g.Usable() && m.NodeGroup(g, term) == nil {
			serving.Insert(g.Name)
		}
	}
	v.NodeGroups = serving.Len()
	for _, n := range nodes {
		if !nodeUsable(n) || n.Labels[karpv1.NodePoolLabelKey] != "" || serving.Has(n.Labels[nodegroups.LabelNodeGroup]) {
			continue
		}
		if m.Node(n.Labels, term) == nil {
			v.Nodes++
		}
	}
	return v
}

// What blocks a NodePool from launching for a pod, the kinds of Verdict.
const (
	BlockedNoNodePool   = "no-nodepool"  // no NodePool serves the term
	BlockedNotReady     = "not-ready"    // the pool is not Ready, or being deleted
	BlockedLimits       = "limits"       // its limits leave no room for one more pod
	BlockedRegistration = "registration" // NodeRegistrationHealthy=False
	BlockedLaunch       = "launch"       // its NodeClaims for the term fail to launch
)

// Verdict is CannotLaunch's answer.
type Verdict struct {
	// Kinds are the Blocked* kinds that decided, sorted; empty when nothing structured
	// says the pod cannot get a node.
	Kinds []string
	// Message says it for people, e.g. "NodePool spot limits exhausted (cpu: 0 left)".
	Message string
}

// Blocked reports whether the verdict is that Karpenter cannot launch for the pod.
func (v Verdict) Blocked() bool { return v.Message != "" }

// CannotLaunch says from Karpenter's objects alone (no Event) whether it can launch a
// node for a pending pod that requests requests and selects the term of v, f being
// what Karpenter is launching for that term. The pod cannot get a node when:
//   - no NodePool serves the term at all, and no node group or other node does either;
//   - or NodePools serve it, no node group does, nothing is launching for the term, and
//     every one of those pools is blocked: not Ready or being deleted; its limits
//     (spec.limits minus status.resources) leave no room for the pod's requests (a new
//     node has some CPU and memory, so none left of either blocks any pod); its status
//     says NodeRegistrationHealthy=False (the nodes it launches do not register); or
//     its NodeClaims for the term fail to launch (Flight.NotLaunched).
//
// Anything else, including a pool whose limits leave less than the smallest instance
// type it may launch, is no verdict: Karpenter's Event words are the second opinion.
func CannotLaunch(v LaunchView, requests corev1.ResourceList, f Flight) Verdict {
	if !v.Watching || v.NodeGroups > 0 {
		return Verdict{}
	}
	if len(v.Pools) == 0 {
		if v.Nodes > 0 {
			return Verdict{}
		}
		msg := "no NodePool is compatible with the term"
		if v.Incompatible != "" {
			msg += " (" + v.Incompatible + ")"
		}
		return Verdict{Kinds: []string{BlockedNoNodePool}, Message: msg}
	}
	if f.Launching > 0 {
		return Verdict{}
	}
	req := requests.DeepCopy()
	if req == nil {
		req = corev1.ResourceList{}
	}
	for name, least := range map[corev1.ResourceName]string{corev1.ResourceCPU: "1m", corev1.ResourceMemory: "1"} {
		if q, ok := req[name]; !ok || q.Sign() <= 0 {
			req[name] = resource.MustParse(least)
		}
	}
	type block struct{ kind, what string }
	var blocks []block
	for _, np := range v.Pools {
		kind, what := poolBlocked(np, req, requests, f)
		if kind == "" {
			return Verdict{}
		}
		blocks = append(blocks, block{kind, what})
	}
	// One clause per distinct block, naming the pools it holds for.
	var clauses []string
	kinds := sets.New[string]()
	done := make([]bool, len(blocks))
	for i, b := range blocks {
		if done[i] {
			continue
		}
		names := []string{v.Pools[i].Name}
		for j := i + 1; j < len(blocks); j++ {
			if !done[j] && blocks[j] == b {
				done[j] = true
				names = append(names, v.Pools[j].Name)
			}
		}
		noun := "NodePool "
		if len(names) > 1 {
			noun = "NodePools "
		}
		clauses = append(clauses, noun+strings.Join(names, ", ")+" "+b.what)
		kinds.Insert(b.kind)
	}
	return Verdict{Kinds: sets.List(kinds), Message: strings.Join(clauses, "; ")}
}

// poolBlocked returns what keeps np from launching a node for a pod requesting req
// (requests as the pod gave them, for the message), "" when nothing does.
func poolBlocked(np *karpv1.NodePool, req, requests corev1.ResourceList, f Flight) (kind, what string) {
	if np.DeletionTimestamp != nil {
		return BlockedNotReady, "being deleted"
	}
	if c := condition(np, "Ready"); c != nil && c.Status == metav1.ConditionFalse {
		return BlockedNotReady, "not Ready (" + reasonOf(c.Reason, c.Message) + ")"
	}
	if h := NodePoolHeadroom(np, req); !h.Unlimited && h.Pods == 0 {
		what := fmt.Sprintf("limits exhausted (%s: %s left", h.Bound, h.Left)
		if q, ok := requests[h.Bound]; ok && h.Bound != corev1.ResourcePods && h.Left != "0" {
			what += ", the pod requests " + q.String()
		}
		return BlockedLimits, what + ")"
	}
	if c := condition(np, karpv1.ConditionTypeNodeRegistrationHealthy); c != nil && c.Status == metav1.ConditionFalse {
		return BlockedRegistration, "cannot register nodes (NodeRegistrationHealthy=False, " + reasonOf(c.Reason, c.Message) + ")"
	}
	if failed := f.NotLaunched[np.Name]; len(failed) > 0 {
		what := "cannot launch (" + failed[0]
		if len(failed) > 1 {
			what += fmt.Sprintf(", and %d more NodeClaims", len(failed)-1)
		}
		return BlockedLaunch, what + ")"
	}
	return "", ""
}

// condition returns np's status condition of type typ, nil when it has none.
func condition(np *karpv1.NodePool, typ string) *metav1.Condition {
	for _, c := range np.Status.Conditions {
		if c.Type == typ {
			return &metav1.Condition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message}
		}
	}
	return nil
}

// reasonOf says a condition's reason and message in a few words.
func reasonOf(reason, message string) string {
	switch {
	case reason == "":
		return truncate(message, 120)
	case message == "":
		return reason
	}
	return reason + ": " + truncate(message, 120)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
