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
	fmt.Fprintln(tw, "TERM\tLABELS\tPODS\tCOST/H\tON-DEMAND/H\tSAVING/H")
	for _, t := range wl.Terms {
		if t.Cost == nil {
			continue
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\n", t.Term, labelString(t.Labels), onNodes(t), usd(t.Cost.USDPerHour), usd(t.Cost.OnDemandUSDPerHour), saving(t.Cost.SavingUSDPerHour, t.Cost.SavingPercent))
	}
	c := wl.Cost
	fmt.Fprintf(tw, "total\t\t%d\t%s\t%s\t%s\n", onNodesAll(wl), usd(c.USDPerHour), usd(c.OnDemandUSDPerHour), saving(c.SavingUSDPerHour, c.SavingPercent))
	for _, u := range c.Unpriced {
		fmt.Fprintf(tw, "\t  not priced: %s\n", u)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write report: %w", err)
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
