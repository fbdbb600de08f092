package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// planTerm is one term of the `plan --output json` document.
type planTerm struct {
	Term   int               `json:"term"`
	Labels map[string]string `json:"labels"`
	Base   int               `json:"base"`
	Weight int               `json:"weight"`
	Count  int               `json:"count"`
}

type planDoc struct {
	Strategy string     `json:"strategy"`
	Replicas int        `json:"replicas"`
	Terms    []planTerm `json:"terms"`
}

func newPlanCommand() *cobra.Command {
	var (
		raw      string
		replicas int
		output   string
	)
	cmd := &cobra.Command{
		Use:   "plan --strategy S --replicas N [-o table|json|yaml]",
		Short: "Print how many of N replicas each term of a strategy holds",
		Example: `  custom-kube-scheduler-webhook plan --replicas 10 \
    --strategy 'karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("strategy") {
				return usageError("--strategy is required")
			}
			if replicas < 0 {
				return usageError("--replicas must not be negative, got %d", replicas)
			}
			format, err := outputFormat(output)
			if err != nil {
				return err
			}
			s, err := strategy.Parse(raw)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			for _, doubt := range s.Warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+doubt)
			}
			return writePlan(cmd.OutOrStdout(), s, replicas, format)
		},
	}
	cmd.Flags().StringVar(&raw, "strategy", "", "the CustomPodScheduleStrategy value")
	cmd.Flags().IntVar(&replicas, "replicas", 1, "number of replicas")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

func writePlan(w io.Writer, s *strategy.Strategy, replicas int, output string) error {
	doc := planDoc{Strategy: s.String(), Replicas: replicas}
	for i, count := range s.Target(replicas) {
		t := s.Terms[i]
		doc.Terms = append(doc.Terms, planTerm{Term: i + 1, Labels: t.LabelMap(), Base: t.Base, Weight: t.Weight, Count: count})
	}
	if output == "json" || output == "yaml" {
		return writeStructured(w, doc, output)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TERM\tLABELS\tBASE\tWEIGHT\tPODS")
	for i, t := range doc.Terms {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\n", t.Term, s.Terms[i].LabelString(), t.Base, t.Weight, t.Count)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	return nil
}
