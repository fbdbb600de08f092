package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
)

// writeSpreadCost writes a workload's cost table (spread --cost); nothing without one.
func writeSpreadCost(w io.Writer, wl report.WorkloadReport) error {
	if wl.Cost == nil {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TERM\tLABELS\tPRICED PODS\tCOST/H\tON-DEMAND/H\tSAVING/H")
	for _, t := range wl.Terms {
		if t.Cost == nil {
			continue
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", t.Term, labelString(t.Labels), priced(t.Cost.PricedPods, onNodes(t)), costColumns(t.Cost))
	}
	c := wl.Cost
	fmt.Fprintf(tw, "total\t\t%s\t%s\n", priced(c.PricedPods, onNodesAll(wl)), costColumns(c))
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	for _, u := range c.Unpriced {
		fmt.Fprintln(w, "  not priced: "+u)
	}
	return nil
}

// onNodes counts a term's pods that run on a node (those that are priced).
func onNodes(t report.TermReport) int {
	n := 0
	for _, node := range t.Nodes {
		n += node.Pods
	}
	return n
}

func onNodesAll(wl report.WorkloadReport) int {
	n := 0
	for _, t := range wl.Terms {
		n += onNodes(t)
	}
	return n
}

func usd(v float64) string { return fmt.Sprintf("$%.4f", v) }

func saving(v, pct float64) string { return fmt.Sprintf("%s (%.1f%%)", usd(v), pct) }

// priced is "3" when every pod on a node was priced, "2 of 3" otherwise.
func priced(n, of int) string {
	if n == of {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%d of %d", n, of)
}

// costColumns are the COST/H, ON-DEMAND/H and SAVING/H cells; dashes when nothing was
// priced (a cost of $0 would be a lie).
func costColumns(c *report.Cost) string {
	if c.PricedPods == 0 {
		return "-\t-\t-"
	}
	return usd(c.USDPerHour) + "\t" + usd(c.OnDemandUSDPerHour) + "\t" + saving(c.SavingUSDPerHour, c.SavingPercent)
}
