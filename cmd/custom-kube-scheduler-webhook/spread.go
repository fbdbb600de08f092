package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

type spreadOptions struct {
	kubeconfig, context, namespace, output string
	allNamespaces                          bool
	// webhookNamespace holds the convergence loop's unavailability records.
	webhookNamespace string
	cost             costFlags
}

func newSpreadCommand() *cobra.Command {
	var o spreadOptions
	cmd := &cobra.Command{
		Use:   "spread [deployment/NAME | statefulset/NAME | replicaset/NAME | rollout/NAME | job/NAME | NAME]",
		Short: "Show, per term, the target and the actual pods of workloads that carry a strategy",
		Long: `Show how each workload that carries a CustomPodScheduleStrategy is spread: per
term the target for the current replica count, the pods placed there (Running,
Pending with the scheduler's reason), their nodes and capacity type, and the
NodePools, node groups or nodes that serve the term. Only the current revision
is counted; pods of older ReplicaSets of a rollout are shown as a total.

A workload is exact when every seat is on its own term. Exit status, so that CI
can gate on it (the worst workload decides): 0 every workload reported is exact;
3 off target (pods unplaced, on another term, or unable to run: the loop is moving
them); 4 in fallback (seats on a fallback term because their own is unavailable,
or a term that no NodePool, node group or node serves: often a typo in a label);
5 not enabled (the webhook is not sent the namespace's pods); 6 invalid strategy;
2 bad usage; 1 any other error (the cluster could not be read). The report is
written in every case.`,
		Example: `  custom-kube-scheduler-webhook spread -n demo
  custom-kube-scheduler-webhook spread -n demo deployment/alpine -o json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	f.StringVar(&o.context, "context", "", "the kubeconfig context to use")
	f.StringVarP(&o.namespace, "namespace", "n", "", "namespace (default: the context's namespace)")
	f.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "report workloads of every namespace")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	f.StringVar(&o.webhookNamespace, "webhook-namespace", "custom-kube-scheduler-webhook", "the webhook's namespace, where its records of unavailable terms are")
	o.cost.register(f)
	return cmd
}

// spreadVerdict is nil when every workload is exact, else an exitError whose status
// is the worst state found (exitFor) and that names the workloads that are not exact.
func spreadVerdict(r report.Report) error {
	var off []string
	code := 0
	for _, wl := range r.Workloads {
		if !wl.Exact {
			off = append(off, fmt.Sprintf("%s %s/%s (%s: %s)", wl.Kind, wl.Namespace, wl.Name, wl.State, wl.Why))
			code = max(code, exitFor(wl.State))
		}
	}
	if len(off) == 0 {
		return nil
	}
	return &exitError{code: code, err: fmt.Errorf("not exact: %s", strings.Join(off, "; "))}
}

// Exit statuses of spread and plan --cluster beyond 0, 1 and 2, one per state that is
// not exact; the worst found wins (the highest).
const (
	exitNotExact   = 3 // off target: pods the loop still has to move, or that cannot run
	exitFallback   = 4 // in fallback: seats on a fallback term, or a term nothing serves
	exitNotEnabled = 5 // the webhook is not sent the namespace's pods
	exitInvalid    = 6 // the strategy does not parse
)

// exitFor is the exit status of a workload in state (report.WorkloadReport.State).
func exitFor(state string) int {
	switch state {
	case string(strategy.StateExact), report.StateAudit:
		return 0
	case string(strategy.StateFallback):
		return exitFallback
	case report.StateNotEnabled:
		return exitNotEnabled
	case report.StateInvalid:
		return exitInvalid
	}
	return exitNotExact
}

// parseWorkloadArg reads "deployment/web", "deploy/web", "sts/db", "rs/x", "job/etl" or "web".
func parseWorkloadArg(arg string) (kind, name string, err error) {
	k, n, found := strings.Cut(arg, "/")
	if !found {
		return "", arg, nil
	}
	switch strings.ToLower(k) {
	case "deployment", "deployments", "deploy":
		return "Deployment", n, nil
	case "statefulset", "statefulsets", "sts":
		return "StatefulSet", n, nil
	case "replicaset", "replicasets", "rs":
		return "ReplicaSet", n, nil
	case "rollout", "rollouts", "ro":
		return "Rollout", n, nil
	case "job", "jobs":
		return "Job", n, nil
	}
	return "", "", fmt.Errorf("unknown workload kind %q: want deployment, statefulset, replicaset, rollout or job", k)
}

func collectSpread(ctx context.Context, o spreadOptions, keep func(kind, name string) bool) (report.Report, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.context})
	restCfg, err := loader.ClientConfig()
	if err != nil {
		return report.Report{}, fmt.Errorf("load kubeconfig: %w", err)
	}
	ns := o.namespace
	if ns == "" {
		if ns, _, err = loader.Namespace(); err != nil {
			return report.Report{}, fmt.Errorf("read the context's namespace: %w", err)
		}
	}
	if o.allNamespaces {
		ns = metav1.NamespaceAll
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return report.Report{}, fmt.Errorf("create Kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return report.Report{}, fmt.Errorf("create dynamic client: %w", err)
	}

	return report.Collect(ctx, client, dyn, report.Options{Namespace: ns, WebhookNamespace: o.webhookNamespace, Keep: keep})
}

// run is spread: the prices first (a bad price file is bad input, found before the
// cluster is asked), then the report, its costs and the exit status of its verdict.
func (o spreadOptions) run(ctx context.Context, out io.Writer, args []string) error {
	format, err := outputFormat(o.output)
	if err != nil {
		return err
	}
	if err := o.cost.validate(); err != nil {
		return err
	}
	var prices pricing.Source
	if o.cost.enabled {
		if prices, err = o.cost.source(ctx); err != nil {
			return err
		}
	}
	keep := func(string, string) bool { return true }
	if len(args) == 1 {
		kind, name, err := parseWorkloadArg(args[0])
		if err != nil {
			return usageError("%w", err)
		}
		keep = func(k, n string) bool { return n == name && (kind == "" || strings.EqualFold(kind, k)) }
	}
	r, err := collectSpread(ctx, o, keep)
	if err != nil {
		return err
	}
	if len(args) == 1 && len(r.Workloads) == 0 {
		return fmt.Errorf("%s: not found, or it carries no active %s", args[0], strategy.AnnotationStrategy)
	}
	if prices != nil {
		report.AddCost(ctx, &r, prices)
	}
	if err := writeSpread(out, r, format); err != nil {
		return err
	}
	return spreadVerdict(r)
}

func writeSpread(w io.Writer, r report.Report, output string) error {
	if output == "json" || output == "yaml" {
		return writeStructured(w, r, output)
	}
	if len(r.Workloads) == 0 {
		if _, err := fmt.Fprintln(w, "No workload here carries an active CustomPodScheduleStrategy."); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
		return writeUnseen(w, r.Unseen)
	}
	if r.Stopped != "" {
		fmt.Fprintf(w, "%s\n\n", r.Stopped)
	}
	for i, wl := range r.Workloads {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if err := writeSpreadWorkload(w, wl); err != nil {
			return err
		}
	}
	return writeUnseen(w, r.Unseen)
}

// writeSpreadWorkload writes one workload: its notes, its terms and the verdict.
func writeSpreadWorkload(w io.Writer, wl report.WorkloadReport) error {
	if !writeSpreadNotes(w, wl) {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TERM\tLABELS\tTARGET\tPLACED\tRUNNING\tPENDING\tSERVED BY\tNODES")
	for _, t := range wl.Terms {
		writeSpreadTerm(tw, t)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	verdict := "exact"
	if !wl.Exact {
		verdict = "NOT exact (" + wl.State + ": " + wl.Why + ")"
	}
	if _, err := fmt.Fprintf(w, "spread %s; unplaced pods %d; pods of older revisions %d; pending repairs %d\n", verdict, wl.Unplaced, wl.OtherRevisions, wl.PendingRepairs); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return writeSpreadCost(w, wl)
}

// writeSpreadNotes writes a workload's heading and notes, and whether its terms follow
// (not for a workload in audit mode or with an invalid strategy).
func writeSpreadNotes(w io.Writer, wl report.WorkloadReport) bool {
	fmt.Fprintf(w, "%s %s/%s  replicas %d  revision %s  strategy from %s\n", wl.Kind, wl.Namespace, wl.Name, wl.Replicas, orDash(wl.Revision), orDash(wl.Source))
	if wl.NotEnabled != "" {
		fmt.Fprintf(w, "  not enabled: %s\n", wl.NotEnabled)
	}
	if wl.NoRevision != "" {
		fmt.Fprintf(w, "  %s\n", wl.NoRevision)
	}
	if a := wl.Audit; a != nil {
		if a.Error != "" {
			fmt.Fprintf(w, "  audit: %s (audit mode) has an invalid strategy: %s\n", a.Source, a.Error)
		} else {
			fmt.Fprintf(w, "  audit: %s (audit mode) would place it by %s, target %v: would move %d pods\n", a.Source, a.Strategy, a.Target, a.WouldMove)
		}
	}
	if wl.State == report.StateAudit {
		return false
	}
	if wl.Waits != "" {
		fmt.Fprintf(w, "  %s\n", wl.Waits)
	}
	if wl.Held != "" {
		fmt.Fprintf(w, "  moves held: %s\n", wl.Held)
	}
	if wl.DoNotDisrupt > 0 {
		fmt.Fprintf(w, "  do-not-disrupt: %d pods stay off their seat's term (karpenter.sh/do-not-disrupt); the loop does not move them\n", wl.DoNotDisrupt)
	}
	if wl.Error != "" {
		fmt.Fprintf(w, "  invalid strategy: %s\n", wl.Error)
		return false
	}
	return true
}

// writeSpreadTerm writes one term's row and its notes.
func writeSpreadTerm(tw io.Writer, t report.TermReport) {
	fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", t.Term, labelString(t.Labels), t.Target, t.Placed, t.Running, t.Pending,
		orDash(strings.Join(t.ServedBy, ",")), orDash(nodeList(t.Nodes)))
	for _, reason := range t.PendingReasons {
		fmt.Fprintf(tw, "\t  pending: %s\n", reason)
	}
	if t.ReservedPods > 0 {
		fmt.Fprintf(tw, "\t  %d of its pods on reserved capacity (priced at nothing: already paid for)\n", t.ReservedPods)
	}
	if i := t.IdleReserved; i != nil {
		fmt.Fprintf(tw, "\t  reserved room idle for %d more of its pods (%s), %d on on-demand: %s\n", i.Pods, strings.Join(i.Reservations, ","), i.OnDemandPods, i.Hint)
	}
	if t.CannotRun > 0 {
		fmt.Fprintf(tw, "\t  %d of its pods cannot run here: %s\n", t.CannotRun, t.CannotRunReason)
	}
	if t.UnavailableUntil != "" {
		fmt.Fprintf(tw, "\t  unavailable until %s: %s; expected %d, %d of its pods on fallback\n", t.UnavailableUntil, t.UnavailableReason, t.Expected, t.FallbackPods)
	} else if t.FallbackPods > 0 {
		fmt.Fprintf(tw, "\t  %d of its pods on fallback, to be moved back\n", t.FallbackPods)
	}
}

// writeUnseen says what the report could not read, and what that leaves out.
func writeUnseen(w io.Writer, unseen []string) error {
	if len(unseen) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("\nNot seen, so not in this report:\n")
	for _, u := range unseen {
		b.WriteString("  - " + u + "\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// labelString is "k=v,k2=v2" with the keys in order (node labels, pod requests).
func labelString(labels map[string]string) string {
	parts := make([]string, 0, len(labels))
	for k, v := range labels {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func nodeList(nodes []report.NodeReport) string {
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		parts[i] = fmt.Sprintf("%s(%s)x%d", n.Name, orDash(n.CapacityType), n.Pods)
	}
	return strings.Join(parts, " ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
