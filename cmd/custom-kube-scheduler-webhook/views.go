package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/tools/cache"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/karpenter/nodegroups"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/ledger"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/policy"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/unavailability"
)

// views are what admission and the leader's jobs read, made by startViews: the pod and
// workload caches, the scope, the policies, the capacity catalog, the seat ledger and
// the unavailability records.
type views struct {
	caches   *clusterview.Caches
	scope    *clusterview.Scope
	policies *policy.Cache
	catalog  *karpenter.Catalog
	groups   *nodegroups.Cache // nil without EKS_CLUSTER_NAME
	seats    *ledger.Ledger
	records  *unavailability.Records
	synced   chan struct{} // closed once every view has synced
}

// waitForSync closes synced once every view has synced.
func (v *views) waitForSync(ctx context.Context, log logrus.FieldLogger) {
	if err := v.caches.WaitForSync(ctx); err != nil {
		log.WithError(err).Error("caches did not sync")
		return
	}
	if err := v.policies.WaitForSync(ctx); err != nil {
		log.WithError(err).Error("policy caches did not sync")
		return
	}
	if !cache.WaitForCacheSync(ctx.Done(), v.scope.HasSynced, v.catalog.HasSynced, func() bool { return len(v.seats.Unsynced()) == 0 }, v.records.HasSynced) {
		log.Error("webhook configuration, NodePool, node group, node, seat record and unavailability record views did not sync")
		return
	}
	close(v.synced)
	log.Info("caches synced; ready")
}

// unsynced is readiness's answer until synced closes: it names each view not synced.
func (v *views) unsynced() error {
	select {
	case <-v.synced:
		return nil
	default:
		return notSynced(v.caches.Unsynced(), v.policies.Unsynced(), v.catalog.Unsynced(), v.seats.Unsynced(), unsyncedIf(!v.records.HasSynced(), "unavailability records"))
	}
}

// notSynced is readiness's answer before the caches have synced: it names each view
// not listed yet.
func notSynced(unsynced ...[]string) error {
	var names []string
	for _, u := range unsynced {
		names = append(names, u...)
	}
	if len(names) == 0 {
		return errors.New("caches not synced yet")
	}
	return fmt.Errorf("caches not synced: %s", strings.Join(names, ", "))
}

// unsyncedIf is []string{name} when cond holds.
func unsyncedIf(cond bool, name string) []string {
	if cond {
		return []string{name}
	}
	return nil
}
