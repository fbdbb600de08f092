package converge

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// LeaderLease is the name of the Lease the replicas elect the loop's runner on.
const LeaderLease = "custom-kube-scheduler-webhook-converge"

// Election timings: a replica that dies is replaced within LeaseDuration plus one
// RetryPeriod (about 10 s).
const (
	leaseDuration = 8 * time.Second
	renewDeadline = 6 * time.Second
	retryPeriod   = 2 * time.Second
)

// RunElected runs run while this process (identity) holds the leader Lease in
// namespace, and campaigns again when it loses it, until ctx ends. Every replica serves
// admission either way. run gets leading, the fence it checks right before each write
// that only the leader may make: true only while this process holds the Lease and renewed
// it within the lease duration, so a leader that stalled (a long pause, a partition) and
// whose Lease another replica may have taken writes nothing before its context ends.
func RunElected(ctx context.Context, client kubernetes.Interface, namespace, identity string, log logrus.FieldLogger, run func(ctx context.Context, leading func() bool)) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: LeaderLease, Namespace: namespace},
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
		Name:            LeaderLease,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) { run(ctx, leading) },
			OnStoppedLeading: func() { log.WithField("identity", identity).Info("not the convergence leader (any more)") },
			OnNewLeader: func(id string) {
				log.WithFields(logrus.Fields{"leader": id, "identity": identity}).Info("convergence leader elected")
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election on Lease %s/%s: %w", namespace, LeaderLease, err)
	}
	for ctx.Err() == nil {
		le.Run(ctx)
	}
	return nil
}
