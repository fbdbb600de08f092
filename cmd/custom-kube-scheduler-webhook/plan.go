package main

import (
	"context"
	"fmt"
	"io"
	corev1 "k8s.io/api/core/v1"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/plan"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// planTerm is one term of the `plan --output json` document.
type planTerm struct {
	Term   int               `json:"term"`
	Labels map[string]string `json:"labels"`
	Base   int               `json:"base"`
	Weight int               `json:"weight"`
	Count  int               `json:"count"`
	// Cost is set by plan --cost without --cluster.
	Cost *plan.Projection `json:"cost,omitempty"`
}

type planDoc struct {
	Strategy string     `json:"strategy"`
	Replicas int        `json:"replicas"`
	Terms    []planTerm `json:"terms"`
	// Cost adds the terms' costs up (plan --cost without --cluster); CostBasis says how
	// a pod is charged for its node.
	Cost      *plan.Totals `json:"cost,omitempty"`
	CostBasis string       `json:"costBasis,omitempty"`
}

// offlineCost is the projection of plan --cost without --cluster.
type offlineCost struct {
	terms       []*plan.Projection
	totals      *plan.Totals
	podsPerNode int
}

// basis says how the projection charges a pod for its node.
func (c *offlineCost) basis() string {
	if c.podsPerNode == 1 {
		return "each pod a whole node: an upper bound; --pods-per-node N charges 1/N"
	}
	return fmt.Sprintf("each pod 1/%d of a node (--pods-per-node)", c.podsPerNode)
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
	// instanceType and podsPerNode size the offline cost projection (--cost without
	// --cluster), which sees no NodePool nor node.
	instanceType string
	podsPerNode  int
	// insecureRegistries are read over plain HTTP when the images are checked.
	insecureRegistries []string
	// policies are the live policies and namespace defaults read with the manifest
	// (--cluster -f): the live workload's placed pods are counted by them.
	policies *policy.Index
}

func newPlanCommand() *cobra.Command {
	var o planOptions
	cmd := &cobra.Command{
		Use:   "plan (--strategy S | -f deploy.yaml) [--replicas N] [--cost [--prices FILE]] [--cluster [--max-replicas M]] [-o table|json|yaml] | plan --cluster -f policy.yaml",
		Short: "Print how many of N replicas each term of a strategy holds; with --cluster, whether the cluster has room for them",
		Long: `Print how many of N replicas each term of a strategy holds.

With --cluster, read the live NodePools (and with --eks-cluster-name the EKS managed
node groups) and say per term which of them serve it, the tolerations its pods get,
how many more pods of the template's requests their limits leave room for, whether
the convergence loop marks the term unavailable, and the first replica count at which
the term runs short. Exit status 0 when every term fits from --replicas to
--max-replicas, 3 when one does not or the namespace is not sent to the webhook (not
enabled: nothing would place the pods), 2 for invalid input.

With --cost, add what each term costs per hour and the saving against all on-demand.
With --cluster the serving NodePools and node groups name the instance types and live
nodes size each pod's share. Without --cluster (offline, e.g. in CI with --prices
FILE) each term is priced on the instance type its node.kubernetes.io/instance-type
label selects (or --instance-type), as the capacity type its karpenter.sh/capacity-type
or eks.amazonaws.com/capacityType label selects, each pod charged a whole node (or
1/--pods-per-node of one); a term whose instance or capacity type cannot be told is
listed as not priced, with the reason.

With --cluster and -f naming a PlacementPolicy, a ClusterPlacementPolicy or a Namespace
(new or edited; a Namespace's CustomPodScheduleStrategy and mode annotations are its
default), print the what-if of applying it: every live workload it would govern or
release, its strategy source and target per term now and after (a workload's own
annotation and policies before it in precedence still win), and the pods the
convergence loop would then move, by name: the count an audited policy's
status.wouldMove gives. It reads each workload's live replicas and plans no cost:
--replicas, --max-replicas, --cost and the other flags of a workload's plan are
refused (exit 2). Exit status 3 when some pod would move (held ones too: they move
once the hold is lifted), 0 when none, 2 for an invalid policy.`,
		Example: `  custom-kube-scheduler-webhook plan --replicas 10 \
    --strategy 'karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3'
  custom-kube-scheduler-webhook plan --cluster -f deploy.yaml --max-replicas 40
  custom-kube-scheduler-webhook plan --cluster -f spot-first-policy.yaml
  custom-kube-scheduler-webhook plan --replicas 10 --cost --prices prices.txt --instance-type m5.large --pods-per-node 4 \
    --strategy 'karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3'
  custom-kube-scheduler-webhook plan --cluster --replicas 40 --requests cpu=500m,memory=512Mi --cost \
    --strategy 'karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3'`,
		Args: cobra.NoArgs,
		RunE: o.run,
	}
	o.register(cmd.Flags())
	return cmd
}

// run is plan: the what-if of a policy or Namespace, the offline plan (with its cost),
// or the plan against the cluster.
func (o *planOptions) run(cmd *cobra.Command, _ []string) error {
	if e, ok, err := o.whatIfEdit(cmd); err != nil || ok {
		if err != nil {
			return err
		}
		return o.runWhatIf(cmd, e)
	}
	in, w, format, err := o.input(cmd)
	if err != nil {
		return err
	}
	for _, doubt := range in.Strategy.Warnings {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+doubt)
	}
	if !o.cluster {
		cost, err := o.offlineCost(cmd.Context(), in)
		if err != nil {
			return err
		}
		return writePlan(cmd.OutOrStdout(), in.Strategy, in.Replicas, format, cost)
	}
	return o.runCluster(cmd, in, w, format)
}

// register adds plan's flags to f.
func (o *planOptions) register(f *pflag.FlagSet) {
	f.StringVar(&o.raw, "strategy", "", "the CustomPodScheduleStrategy value")
	f.StringVarP(&o.file, "filename", "f", "", "a Deployment, StatefulSet, Argo Rollout, Job or CronJob manifest: its strategy, replicas and pod requests; with --cluster also a policy or Namespace manifest (the what-if of applying it)")
	f.IntVar(&o.replicas, "replicas", 1, "number of replicas (with -f: the manifest's)")
	f.IntVar(&o.maxReplicas, "max-replicas", 0, "with --cluster: the top of the replica range, e.g. an HPA's maxReplicas (default: --replicas)")
	f.BoolVar(&o.cluster, "cluster", false, "check the plan against the live cluster's NodePools and node groups")
	f.StringVar(&o.requests, "requests", "", "one pod's requests, e.g. cpu=500m,memory=1Gi (with -f: the template's)")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	f.StringVar(&o.webhookNamespace, "webhook-namespace", "custom-kube-scheduler-webhook", "the webhook's namespace, where its records of unavailable terms are")
	f.StringVar(&o.eksCluster, "eks-cluster-name", os.Getenv("EKS_CLUSTER_NAME"), "EKS cluster whose managed node groups to read (default: $EKS_CLUSTER_NAME; empty: none)")
	f.StringVar(&o.instanceType, "instance-type", "", "with --cost and without --cluster: the instance type of terms that select no node.kubernetes.io/instance-type")
	f.IntVar(&o.podsPerNode, "pods-per-node", 1, "with --cost and without --cluster: how many pods share a node (each is charged 1/N of its price; default: a whole node)")
	f.StringSliceVar(&o.insecureRegistries, "image-insecure-registries", nil, "with --cluster and -f: registries (host:port) read over plain HTTP when the pod template's images are checked against terms pinning kubernetes.io/arch")
	o.kube.register(f)
	o.cost.register(f)
}

// offlineCost prices the plan without a cluster (nil without --cost): the terms'
// labels name the instance and capacity types, the price file or AWS prices them.
func (o *planOptions) offlineCost(ctx context.Context, in plan.Input) (*offlineCost, error) {
	if !o.cost.enabled {
		return nil, nil
	}
	prices, err := o.cost.source(ctx)
	if err != nil {
		return nil, err
	}
	opts := plan.OfflineOptions{InstanceType: o.instanceType, Region: o.cost.region, PodsPerNode: o.podsPerNode}
	terms, totals := plan.ProjectOffline(ctx, in.Strategy, in.Replicas, opts, prices)
	return &offlineCost{terms: terms, totals: totals, podsPerNode: o.podsPerNode}, nil
}

// writePlan writes the plan, and with cost (not nil) its offline cost projection.
func writePlan(w io.Writer, s *strategy.Strategy, replicas int, output string, cost *offlineCost) error {
	doc := planDoc{Strategy: s.String(), Replicas: replicas}
	for i, count := range s.Target(replicas) {
		t := s.Terms[i]
		doc.Terms = append(doc.Terms, planTerm{Term: i + 1, Labels: t.LabelMap(), Base: t.Base, Weight: t.Weight, Count: count})
		if cost != nil {
			doc.Terms[i].Cost = cost.terms[i]
		}
	}
	if cost != nil {
		doc.Cost, doc.CostBasis = cost.totals, cost.basis()
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
	if cost == nil {
		return nil
	}
	r := plan.Result{MaxReplicas: replicas, Cost: cost.totals}
	for _, t := range doc.Terms {
		r.Terms = append(r.Terms, plan.Term{Term: t.Term, Cost: t.Cost})
	}
	return writePlanCost(w, r, cost.basis())
}

// manifestWorkload is the live workload a -f manifest names, if any.
type manifestWorkload struct {
	kind, namespace, name string
	// spec is the pod template's spec (nil: no manifest).
	spec *corev1.PodSpec
}
