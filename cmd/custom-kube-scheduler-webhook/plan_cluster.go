package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/plan"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/pricing"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
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
	switch {
	case o.file != "" && flags.Changed("strategy"):
		return in, w, "", usageError("give --strategy or -f, not both")
	case o.file == "" && !flags.Changed("strategy"):
		return in, w, "", usageError("--strategy or -f is required")
	case !o.cluster && (flags.Changed("max-replicas") || o.cost.enabled || o.requests != ""):
		return in, w, "", usageError("--max-replicas, --requests and --cost need --cluster")
	}
	if err := o.cost.validate(); err != nil {
		return in, w, "", err
	}
	raw := o.raw
	if o.file != "" {
		data, err := os.ReadFile(o.file)
		if err != nil {
			return in, w, "", usageError("read manifest: %w", err)
		}
		m, err := plan.ReadManifest(data)
		if err != nil {
			return in, w, "", usageError("%s: %w", o.file, err)
		}
		raw, in.Requests, w = m.Strategy, m.Requests, manifestWorkload{kind: m.Kind, namespace: m.Namespace, name: m.Name}
		if !flags.Changed("replicas") {
			o.replicas = m.Replicas
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
	opts := plan.Options{WebhookNamespace: o.webhookNamespace, Kind: w.kind, Namespace: w.namespace, Name: w.name}
	if opts.Name != "" && opts.Namespace == "" {
		opts.Namespace = kc.namespace
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
	if r.Fits {
		return nil
	}
	var short []string
	for _, t := range r.Terms {
		if !t.Fits {
			short = append(short, fmt.Sprintf("term %d (%s) runs short at %d replicas: %s", t.Term, labelString(t.Labels), t.ShortAt, t.Short))
		}
	}
	return &exitError{code: 3, err: errors.New(strings.Join(short, "; "))}
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
