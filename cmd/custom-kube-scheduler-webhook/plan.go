package main

import (
	"fmt"
	"io"
	"os"
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

// maxPlanReplicas bounds --replicas and --max-replicas: the plan walks every seat.
const maxPlanReplicas = 1_000_000

type planOptions struct {
	raw, output, file, requests string
	replicas, maxReplicas       int
	cluster                     bool
	kube                        kubeFlags
	webhookNamespace            string
	eksCluster                  string
	cost                        costFlags
}

func newPlanCommand() *cobra.Command {
	var o planOptions
	cmd := &cobra.Command{
		Use:   "plan (--strategy S | -f deploy.yaml) [--replicas N] [--cluster [--max-replicas M] [--cost]] [-o table|json|yaml]",
		Short: "Print how many of N replicas each term of a strategy holds; with --cluster, whether the cluster has room for them",
		Long: `Print how many of N replicas each term of a strategy holds.

With --cluster, read the live NodePools (and with --eks-cluster-name the EKS managed
node groups) and say per term which of them serve it, the tolerations its pods get,
how many more pods of the template's requests their limits leave room for, whether
the convergence loop marks the term unavailable, and the first replica count at which
the term runs short. Exit status 0 when every term fits from --replicas to
--max-replicas, 3 when one does not, 2 for invalid input.`,
		Example: `  custom-kube-scheduler-webhook plan --replicas 10 \
    --strategy 'karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3'
  custom-kube-scheduler-webhook plan --cluster -f deploy.yaml --max-replicas 40
  custom-kube-scheduler-webhook plan --cluster --replicas 40 --requests cpu=500m,memory=512Mi --cost \
    --strategy 'karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in, w, format, err := o.input(cmd)
			if err != nil {
				return err
			}
			for _, doubt := range in.Strategy.Warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+doubt)
			}
			if !o.cluster {
				return writePlan(cmd.OutOrStdout(), in.Strategy, in.Replicas, format)
			}
			return o.runCluster(cmd, in, w, format)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.raw, "strategy", "", "the CustomPodScheduleStrategy value")
	f.StringVarP(&o.file, "filename", "f", "", "a Deployment or StatefulSet manifest: its strategy, replicas and pod requests")
	f.IntVar(&o.replicas, "replicas", 1, "number of replicas (with -f: the manifest's)")
	f.IntVar(&o.maxReplicas, "max-replicas", 0, "with --cluster: the top of the replica range, e.g. an HPA's maxReplicas (default: --replicas)")
	f.BoolVar(&o.cluster, "cluster", false, "check the plan against the live cluster's NodePools and node groups")
	f.StringVar(&o.requests, "requests", "", "one pod's requests, e.g. cpu=500m,memory=1Gi (with -f: the template's)")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	f.StringVar(&o.webhookNamespace, "webhook-namespace", "custom-kube-scheduler-webhook", "the webhook's namespace, where its records of unavailable terms are")
	f.StringVar(&o.eksCluster, "eks-cluster-name", os.Getenv("EKS_CLUSTER_NAME"), "EKS cluster whose managed node groups to read (default: $EKS_CLUSTER_NAME; empty: none)")
	o.kube.register(f)
	o.cost.register(f)
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

// manifestWorkload is the live workload a -f manifest names, if any.
type manifestWorkload struct {
	kind, namespace, name string
}
