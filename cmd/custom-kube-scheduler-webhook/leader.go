package main

// The leader's jobs: the convergence loop, the policies' status, the cost refresh and
// the interruption signals the loop reads.

import (
	"context"
	"fmt"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/converge"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/interruption"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/report"
)

// leaderJobs are what serve makes for the leader's jobs beside the views.
type leaderJobs struct {
	recorder record.EventRecorder
	metrics  *converge.Metrics
	costs    *report.CostRefresher // nil with COST_METRICS=off
	signals  *interruption.Signals // nil without INTERRUPTION_QUEUE
}

// startConverge starts the leader's jobs: on the replica elected on the leader Lease,
// once the caches have synced, the convergence loop (CONVERGE=on), the policies'
// status, the cost refresher (jobs.costs, nil: off) and the interruption signals
// (jobs.signals, nil: off). With CONVERGE=off there is no election and every replica
// refreshes the costs. The returned channel is closed once the election has ended
// after ctx: the leader releases its Lease then, so the next replica leads at once
// instead of after the Lease lapses.
func (r *replica) startConverge(ctx context.Context, jobs leaderJobs) (elected <-chan struct{}, err error) {
	entry := r.log.WithField("component", "converge")
	done := make(chan struct{})
	if !r.cfg.Converge {
		entry.Info("convergence loop switched off (CONVERGE=off)")
		if jobs.costs != nil {
			go jobs.costs.Run(ctx)
		}
		close(done)
		return done, nil
	}
	// What Karpenter is launching: a term whose pods wait is not called unavailable
	// while NodeClaims for it are on their way.
	dyn, err := dynamic.NewForConfig(r.restCfg)
	if err != nil {
		return nil, fmt.Errorf("create dynamic client: %w", err)
	}
	claims, err := karpenter.NewNodeClaims(dyn, r.client.Discovery(), entry)
	if err != nil {
		return nil, err
	}
	loop, err := r.newLoop(claims, jobs, entry)
	if err != nil {
		return nil, err
	}
	if jobs.signals != nil {
		// A new signal passes every revision again (the poller starts only with the loop).
		jobs.signals.OnChange(loop.InterruptionSignalled)
	}
	// A policy change is a strategy change for the workloads it governs; a namespace's
	// labels (policies.OnChange) and the webhook configuration (scope) change the scope.
	// The stop switch on the webhook's namespace concerns every workload.
	if err := r.policies.OnChange(func(ns string) {
		if ns == r.cfg.Namespaces.Own {
			ns = ""
		}
		loop.PoliciesChanged(ns)
	}); err != nil {
		return nil, err
	}
	if err := r.scope.OnChange(func() { loop.PoliciesChanged("") }); err != nil {
		return nil, err
	}
	go claims.Run(ctx)
	go func() {
		defer close(done)
		r.runElected(ctx, loop, dyn, jobs, entry)
	}()
	return done, nil
}

// newLoop makes the convergence loop over the views, with a client and rate of its
// own: a pass over hundreds of short revisions must not slow the informers, Events or
// seat records that share the main client, nor be slowed by them.
func (r *replica) newLoop(claims *karpenter.NodeClaims, jobs leaderJobs, entry logrus.FieldLogger) (*converge.Loop, error) {
	loopCfg := rest.CopyConfig(r.restCfg)
	loopCfg.QPS, loopCfg.Burst = 20, 40
	// Its own user agent too, so the API server's audit log and metrics tell its
	// requests from admission's.
	loopCfg.UserAgent = r.restCfg.UserAgent + "/converge"
	loopClient, err := kubernetes.NewForConfig(loopCfg)
	if err != nil {
		return nil, fmt.Errorf("create the convergence loop's client: %w", err)
	}
	convergeCfg := converge.Config{
		Client: loopClient, Caches: r.caches, Records: r.records, Recorder: jobs.recorder, Metrics: jobs.metrics,
		Namespaces: r.cfg.Namespaces,
		Scope:      r.scope, Settings: r.cfg.Loop,
		// Karpenter's word on a term: its NodePools and NodeClaims first, its Events second.
		Signals:  converge.NewKarpenterSignals(loopClient, r.catalog, claims),
		Launches: claims,
		Served:   r.catalog.Serves,
		Stopped:  policy.Stopped(r.policies.MovesOff, r.cfg.Namespaces.Own),
		Log:      entry,
	}
	if jobs.signals != nil {
		convergeCfg.Interruptions = jobs.signals.Tracker
		entry.WithField("moveSignalledNodes", r.cfg.Loop.MoveSignalledNodes).Info("the loop acts on the interruption signals")
	}
	return converge.NewLoop(convergeCfg)
}

// runElected waits for the views to sync, then runs the leader's jobs while this
// replica holds the leader Lease.
func (r *replica) runElected(ctx context.Context, loop *converge.Loop, dyn dynamic.Interface, jobs leaderJobs, entry logrus.FieldLogger) {
	select {
	case <-r.synced:
	case <-ctx.Done():
		return
	}
	// The elected replica also writes the policies' status: every 30s, and soon after a
	// policy or namespace changed.
	changes := make(chan struct{}, 1)
	if err := r.policies.OnChange(func(string) {
		select {
		case changes <- struct{}{}:
		default:
		}
	}); err != nil {
		entry.WithError(err).Warn("policy status written every 30s only")
	}
	unserved := policy.Unserved(r.catalog.Unserved)
	stopped := policy.Stopped(r.policies.MovesOff, r.cfg.Namespaces.Own)
	status := &policy.StatusWriter{Cache: r.policies, Dyn: dyn, Log: entry, Unserved: unserved, Changes: changes,
		Audited:   func(a policy.Audited) { jobs.metrics.Audited(a.Workloads, a.WouldMove) },
		Stopped:   func() string { return stopped("") },
		Workloads: r.caches.Governable(r.cfg.Namespaces.Skip, r.scope, clusterview.TermFacts{Unavailable: r.records.Unavailable, Unserved: unserved}, r.cfg.Loop.Timing)}
	run := func(ctx context.Context, leading func() bool) {
		statusCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		go status.Run(statusCtx)
		if jobs.costs != nil {
			go jobs.costs.Run(statusCtx)
		}
		if jobs.signals != nil {
			go jobs.signals.Run(statusCtx)
		}
		loop.Run(ctx, leading)
	}
	if err := converge.RunElected(ctx, r.client, r.cfg.Namespaces.Own, r.identity, r.owner, entry, run); err != nil {
		entry.WithError(err).Error("convergence loop not started")
	}
}
