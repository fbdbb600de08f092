package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/imagearch"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/plan"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/placement"
)

// input reads the flags and the manifest into what is planned.
func (o *planOptions) input(cmd *cobra.Command) (plan.Input, manifestWorkload, string, error) {
	var in plan.Input
	var w manifestWorkload
	format, err := outputFormat(o.output)
	if err != nil {
		return in, w, "", err
	}
	flags := cmd.Flags()
	if err := o.checkFlags(flags); err != nil {
		return in, w, "", err
	}
	raw := o.raw
	if o.file != "" {
		if raw, w, err = o.readManifest(cmd, &in); err != nil {
			return in, w, "", err
		}
	}
	if o.requests != "" {
		if in.Requests, err = parseRequests(o.requests); err != nil {
			return in, w, "", usageError("--requests: %w", err)
		}
	}
	if !flags.Changed("max-replicas") {
		o.maxReplicas = o.replicas
	}
	switch {
	case o.replicas < 0:
		return in, w, "", usageError("--replicas must not be negative, got %d", o.replicas)
	// Named before --max-replicas, which defaults to --replicas: the user gave this one.
	case o.replicas > maxPlanReplicas:
		return in, w, "", usageError("--replicas must be at most %d, got %d", maxPlanReplicas, o.replicas)
	case o.maxReplicas < o.replicas:
		return in, w, "", usageError("--max-replicas %d is below --replicas %d", o.maxReplicas, o.replicas)
	case o.maxReplicas > maxPlanReplicas:
		return in, w, "", usageError("--max-replicas must be at most %d, got %d", maxPlanReplicas, o.maxReplicas)
	}
	if in.Strategy, err = strategy.Parse(raw); err != nil {
		return in, w, "", &exitError{code: 2, err: err}
	}
	in.Replicas, in.MaxReplicas = o.replicas, o.maxReplicas
	return in, w, format, nil
}

// checkFlags refuses flags that go only with others, before anything is read.
func (o *planOptions) checkFlags(flags *pflag.FlagSet) error {
	switch {
	case o.file != "" && flags.Changed("strategy"):
		return usageError("give --strategy or -f, not both")
	case o.file == "" && !flags.Changed("strategy"):
		return usageError("--strategy or -f is required")
	case !o.cluster && (flags.Changed("max-replicas") || o.requests != ""):
		return usageError("--max-replicas and --requests need --cluster")
	case o.cluster && (flags.Changed("instance-type") || flags.Changed("pods-per-node")):
		// The cluster's NodePools name the instance types and its nodes size the pods.
		return usageError("--instance-type and --pods-per-node are for --cost without --cluster")
	case !o.cost.enabled && (flags.Changed("instance-type") || flags.Changed("pods-per-node")):
		return usageError("--instance-type and --pods-per-node need --cost")
	case o.podsPerNode < 1:
		return usageError("--pods-per-node must be at least 1, got %d", o.podsPerNode)
	}
	return o.cost.validate()
}

// readManifest reads -f: the strategy (returned), the pod requests (into in), the
// workload, and the replicas unless --replicas is given.
func (o *planOptions) readManifest(cmd *cobra.Command, in *plan.Input) (string, manifestWorkload, error) {
	data, err := os.ReadFile(o.file)
	if err != nil {
		return "", manifestWorkload{}, usageError("read manifest: %w", err)
	}
	var m plan.Workload
	if o.cluster {
		m, err = o.readManifestInCluster(cmd, data)
	} else {
		m, err = plan.ReadManifest(data)
	}
	if err != nil {
		return "", manifestWorkload{}, usageError("%s: %w", o.file, err)
	}
	if o.cluster && !strings.HasPrefix(m.Source, m.Kind+" ") && !strings.HasPrefix(m.Source, "the pod template of ") {
		// Not the manifest's own: say which policy or namespace default it is.
		fmt.Fprintf(cmd.ErrOrStderr(), "strategy from %s\n", m.Source)
	}
	in.Requests = m.Requests
	if !cmd.Flags().Changed("replicas") {
		o.replicas = m.Replicas
	}
	return m.Strategy, manifestWorkload{kind: m.Kind, namespace: m.Namespace, name: m.Name, spec: m.PodSpec}, nil
}

// readManifestInCluster reads the manifest's workload as the cluster would place it:
// without a strategy of its own, its policy's or namespace default's.
func (o *planOptions) readManifestInCluster(cmd *cobra.Command, data []byte) (plan.Workload, error) {
	kc, err := o.kube.clients()
	if err != nil {
		return plan.Workload{}, err
	}
	idx, unseen := report.ReadPolicies(cmd.Context(), kc.client, kc.dynamic, kc.namespace)
	for _, u := range unseen {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: not read: "+u)
	}
	o.policies = idx
	return plan.ReadManifestWith(data, idx, kc.namespace)
}

// parseRequests reads "cpu=500m,memory=1Gi".
func parseRequests(s string) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for _, part := range strings.Split(s, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("%q: want name=quantity, e.g. cpu=500m", part)
		}
		q, err := resource.ParseQuantity(value)
		if err != nil || q.Sign() < 0 {
			return nil, fmt.Errorf("%s=%q: not a non-negative quantity", name, value)
		}
		out[corev1.ResourceName(name)] = q
	}
	return out, nil
}

// runCluster plans against the live cluster and maps the verdict to the exit status.
func (o *planOptions) runCluster(cmd *cobra.Command, in plan.Input, w manifestWorkload, format string) error {
	ctx := cmd.Context()
	var prices pricing.Source
	if o.cost.enabled {
		var err error
		if prices, err = o.cost.source(ctx); err != nil {
			return err
		}
	}
	kc, err := o.kube.clients()
	if err != nil {
		return err
	}
	opts := plan.Options{WebhookNamespace: o.webhookNamespace, Kind: w.kind, Namespace: w.namespace, Name: w.name, Policies: o.policies}
	if opts.Name != "" && opts.Namespace == "" {
		opts.Namespace = kc.namespace
	}
	// The namespace of the manifest's workload, or the one given with -n.
	var notEnabled string
	if ns := firstNonEmpty(opts.Namespace, o.kube.namespace); ns != "" {
		if notEnabled, err = warnNotEnabled(ctx, cmd.ErrOrStderr(), kc, ns, opts); err != nil {
			return err
		}
	}
	if o.eksCluster != "" {
		opts.NodeGroups = func(ctx context.Context) ([]nodegroups.Group, error) { return readNodeGroups(ctx, o.eksCluster) }
	}
	capacity, placed, err := plan.Collect(ctx, kc.client, kc.dynamic, in.Strategy, opts)
	if err != nil {
		return err
	}
	in.Placed = placed
	r := plan.Compute(in, capacity)
	if prices != nil {
		plan.Project(ctx, in, capacity, &r, prices)
	}
	if err := writeClusterPlan(cmd.OutOrStdout(), r, format); err != nil {
		return err
	}
	cannotRun := o.checkImages(ctx, cmd.ErrOrStderr(), kc, w, in)
	if r.Fits && len(cannotRun) == 0 && notEnabled == "" {
		return nil
	}
	// The exit status is spread's for the state the plan predicts; the worst wins.
	short, code := cannotRun, 0
	if len(cannotRun) > 0 {
		code = exitNotExact
	}
	for _, t := range r.Terms {
		if !t.Fits {
			short = append(short, fmt.Sprintf("term %d (%s) runs short at %d replicas, its seats would go to the fallback: %s", t.Term, labelString(t.Labels), t.ShortAt, t.Short))
			code = max(code, exitFallback)
		}
	}
	if notEnabled != "" {
		short, code = append(short, notEnabled), exitNotEnabled
	}
	return &exitError{code: code, err: errors.New(strings.Join(short, "; "))}
}

// checkImages looks the manifest's images up (anonymously, with an ECR token from the
// local AWS configuration, or with the namespace's pull secrets the kubeconfig may read)
// and returns the terms pinning an architecture none of them supports, after writing
// each as a warning; a lookup that fails is a warning too.
func (o *planOptions) checkImages(ctx context.Context, stderr io.Writer, kc kubeClients, w manifestWorkload, in plan.Input) []string {
	if w.spec == nil {
		return nil
	}
	ns := firstNonEmpty(w.namespace, kc.namespace)
	resolver := imagearch.New(imagearch.Config{PullSecrets: true, Kube: kc.client, Insecure: o.insecureRegistries})
	ia := &placement.ImageArchitectures{Images: resolver, Budget: 30 * time.Second}
	faults, _, err := ia.Check(ctx, ns, w.spec, in.Strategy, fmt.Sprintf("%s %s/%s", w.kind, ns, w.name))
	if err != nil {
		fmt.Fprintf(stderr, "warning: the images' architectures were not checked: %v\n", err)
	}
	for _, f := range faults {
		fmt.Fprintln(stderr, "warning: "+f)
	}
	return faults
}

// warnNotEnabled writes a warning, and returns it, when the API server does not send the
// planned workload's namespace to the webhook: the plan would then describe nothing that
// happens (runCluster exits 5).
func warnNotEnabled(ctx context.Context, w io.Writer, kc kubeClients, ns string, opts plan.Options) (string, error) {
	scope, err := report.ReadScope(ctx, kc.client)
	if err != nil {
		return "", err
	}
	what := "this workload"
	if opts.Name != "" {
		what = fmt.Sprintf("%s %s/%s", opts.Kind, ns, opts.Name)
	}
	msg, _, err := scope.NotEnabled(ctx, ns, what)
	if err != nil || msg == "" {
		return "", err
	}
	_, err = fmt.Fprintln(w, "warning: "+msg)
	return msg, err
}

// readNodeGroups lists the EKS managed node groups once, bounded in time.
func readNodeGroups(ctx context.Context, cluster string) ([]nodegroups.Group, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	client, err := nodegroups.NewClient(ctx, nodegroups.ClientOptions{RetryMaxAttempts: 2})
	if err != nil {
		return nil, err
	}
	cache, err := nodegroups.New(client, nodegroups.Config{ClusterName: cluster})
	if err != nil {
		return nil, err
	}
	if err := cache.Refresh(ctx); err != nil {
		return nil, err
	}
	return cache.Groups(), nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
