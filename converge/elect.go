package converge

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/retry"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/ownership"
)

// leaderLease is the name of the Lease the replicas elect the loop's runner on.
const leaderLease = "custom-kube-scheduler-webhook-converge"

// Election timings: a replica that dies is replaced within LeaseDuration plus one
// RetryPeriod (about 10 s).
const (
	leaseDuration = 8 * time.Second
	renewDeadline = 6 * time.Second
	retryPeriod   = 2 * time.Second
)

// RunElected runs run while this process (identity) holds the leader Lease in
// namespace, and campaigns again when it loses it, until ctx ends. The Lease carries
// owner's reference (see adoptLeaderLease). Every replica serves
// admission either way. run gets leading, the fence it checks right before each write
// that only the leader may make: true only while this process holds the Lease and renewed
// it within the lease duration, so a leader that stalled (a long pause, a partition) and
// whose Lease another replica may have taken writes nothing before its context ends.
func RunElected(ctx context.Context, client kubernetes.Interface, namespace, identity string, owner ownership.Owner, log logrus.FieldLogger, run func(ctx context.Context, leading func() bool)) error {
	if err := adoptLeaderLease(ctx, client, namespace, owner); err != nil {
		// Not fatal: the election works without the reference; only uninstall would
		// leave this one Lease behind.
		log.WithError(err).Warn("leader Lease without its owner reference")
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: leaderLease, Namespace: namespace},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
	var le *leaderelection.LeaderElector
	leading := func() bool { return le.IsLeader() && le.Check(0) == nil }
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   leaseDuration,
		RenewDeadline:   renewDeadline,
		RetryPeriod:     retryPeriod,
		ReleaseOnCancel: true,
		Name:            leaderLease,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) { run(ctx, leading) },
			OnStoppedLeading: func() { log.WithField("identity", identity).Info("not the convergence leader (any more)") },
			OnNewLeader: func(id string) {
				log.WithFields(logrus.Fields{"leader": id, "identity": identity}).Info("convergence leader elected")
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election on Lease %s/%s: %w", namespace, leaderLease, err)
	}
	for ctx.Err() == nil {
		le.Run(ctx)
	}
	return nil
}

// adoptLeaderLease creates the leader Lease with owner's reference, or adds the reference
// to an existing one, so the Lease is deleted with its owner. client-go's lock creates
// the Lease with a name only, and keeps the metadata it finds on every later write. The
// zero Owner does nothing.
func adoptLeaderLease(ctx context.Context, client kubernetes.Interface, namespace string, owner ownership.Owner) error {
	if owner.IsZero() {
		return nil
	}
	leases := client.CoordinationV1().Leases(namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lease, err := leases.Get(ctx, leaderLease, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaderLease, Namespace: namespace}}
			owner.Apply(&lease.ObjectMeta)
			_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				// Created meanwhile by another replica: adopt that one on the retry.
				return apierrors.NewConflict(coordinationv1.Resource("leases"), leaderLease, err)
			}
			return err
		}
		if err != nil {
			return fmt.Errorf("read leader Lease %s/%s: %w", namespace, leaderLease, err)
		}
		if !owner.Apply(&lease.ObjectMeta) {
			return nil
		}
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		return err
	})
}
