package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/plan"
)

// writeClusterPlan writes `plan --cluster`'s document.
func writeClusterPlan(w io.Writer, r plan.Result, output string) error {
	if output == "json" || output == "yaml" {
		return writeStructured(w, r, output)
	}
	replicas := strconv.Itoa(r.Replicas)
	if r.MaxReplicas != r.Replicas {
		replicas = fmt.Sprintf("%d to %d", r.Replicas, r.MaxReplicas)
	}
	fmt.Fprintf(w, "strategy %s\nreplicas %s; pod requests %s\n\n", r.Strategy, replicas, orDash(labelString(r.Requests)))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TERM\tLABELS\tPODS\tPLACED\tROOM\tSHORT AT\tSERVED BY")
	var notes []string
	for _, t := range r.Terms {
		pods := strconv.Itoa(t.Target)
		if t.TargetMax != t.Target {
			pods += ".." + strconv.Itoa(t.TargetMax)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\n", t.Term, labelString(t.Labels), pods, t.Placed, room(t), shortAt(t.ShortAt), orDash(servedBy(t)))
		if len(t.Tolerations) > 0 {
			notes = append(notes, fmt.Sprintf("term %d tolerates %s", t.Term, tolerationString(t.Tolerations)))
		}
		if t.UnavailableUntil != "" {
			notes = append(notes, fmt.Sprintf("term %d unavailable until %s: %s", t.Term, t.UnavailableUntil, t.UnavailableReason))
		}
		if t.Short != "" {
			notes = append(notes, fmt.Sprintf("term %d short at %d replicas: %s", t.Term, t.ShortAt, t.Short))
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	for _, n := range notes {
		fmt.Fprintln(w, "  "+n)
	}
	verdict := "plan fits: every term has room from " + strconv.Itoa(r.Replicas) + " to " + strconv.Itoa(r.MaxReplicas) + " replicas"
	if !r.Fits {
		verdict = "plan does NOT fit"
	}
	fmt.Fprintln(w, verdict)
	if err := writePlanCost(w, r, "each pod its share of a node"); err != nil {
		return err
	}
	return writeUnseen(w, r.Unseen)
}

func room(t plan.Term) string {
	switch {
	case t.Unlimited:
		return "unlimited"
	case t.RoomUnknown:
		return fmt.Sprintf("%d+?", t.Room)
	}
	return strconv.Itoa(t.Room)
}

func shortAt(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func servedBy(t plan.Term) string {
	var parts []string
	for _, p := range t.NodePools {
		switch {
		case p.Unlimited:
			parts = append(parts, "NodePool/"+p.Name+" (no limit)")
		default:
			parts = append(parts, fmt.Sprintf("NodePool/%s (%d pods, %s %s left)", p.Name, p.Pods, p.Bound, p.Left))
		}
	}
	for _, g := range t.NodeGroups {
		per := "? pods each"
		if g.PodsPerNode > 0 {
			per = fmt.Sprintf("%d pods", g.Pods)
		}
		parts = append(parts, fmt.Sprintf("NodeGroup/%s (%d free nodes, %s)", g.Name, g.FreeNodes, per))
	}
	if t.Nodes > 0 {
		parts = append(parts, fmt.Sprintf("%d other nodes", t.Nodes))
	}
	return strings.Join(parts, ", ")
}

func tolerationString(ts []corev1.Toleration) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		s := t.Key
		if t.Operator == corev1.TolerationOpExists {
			s += " exists"
		} else {
			s += "=" + t.Value
		}
		if t.Effect != "" {
			s += ":" + string(t.Effect)
		}
		parts[i] = s
	}
	return strings.Join(parts, ", ")
}

// writePlanCost writes the cost projection of plan --cost; basis says how a pod is
// charged for its node.
func writePlanCost(w io.Writer, r plan.Result, basis string) error {
	if r.Cost == nil {
		return nil
	}
	fmt.Fprintf(w, "\ncost at %d replicas (%s):\n", r.MaxReplicas, basis)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TERM\tPODS\tCHEAPEST/H\tMEDIAN/H\tON-DEMAND MEDIAN/H\tOFFERINGS")
	var unpriced []string
	for _, t := range r.Terms {
		c := t.Cost
		if c == nil {
			continue
		}
		cheapest := "-"
		if c.Offerings > 0 {
			cheapest = usd(c.CheapestUSDPerHour) + " (" + c.CheapestOffering + ")"
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%d\n", t.Term, c.Pods, cheapest, usd(c.MedianUSDPerHour), usd(c.OnDemandMedianUSDPerHour), c.Offerings)
		for _, u := range c.Unpriced {
			unpriced = append(unpriced, fmt.Sprintf("term %d not priced: %s", t.Term, u))
		}
	}
	c := r.Cost
	fmt.Fprintf(tw, "total\t\t%s\t%s\t%s\tsaving %s\n", usd(c.CheapestUSDPerHour), usd(c.MedianUSDPerHour), usd(c.OnDemandMedianUSDPerHour), saving(c.SavingUSDPerHour, c.SavingPercent))
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	for _, u := range unpriced {
		fmt.Fprintln(w, "  "+u)
	}
	return nil
}
