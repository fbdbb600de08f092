// Command karpenter-kwok is Karpenter with its kwok cloud provider, as
// sigs.k8s.io/karpenter/kwok builds it, plus the two things a provider with
// capacity reservations does and the kwok provider leaves out, so the local
// cluster can offer a reservation (up.sh's instance-types file):
//   - it names the reservation ID label: Karpenter core leaves
//     cloudprovider.ReservationIDLabel empty, and a reserved offering then has no
//     ID to reserve (the scheduler panics) nor a label key for its NodeClaim;
//   - it reports a reservation's remaining capacity, its size in the file less the
//     NodeClaims launched into it, and the offering unavailable when none is left,
//     as the AWS provider does from EC2: kwok's offerings are static, so every
//     scheduling round would see the whole reservation again.
//
// It is built only for the Karpenter version of this module's go.mod (build.sh).
package main

import (
	"context"
	"fmt"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	kwok "sigs.k8s.io/karpenter/kwok/cloudprovider"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/overlay"
	"sigs.k8s.io/karpenter/pkg/controllers"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/operator"
)

// reservationIDLabel is the AWS provider's label for a reservation's ID, which the
// instance-types file's reserved offerings carry as a requirement.
const reservationIDLabel = "karpenter.k8s.aws/capacity-reservation-id"

func main() {
	cloudprovider.ReservationIDLabel = reservationIDLabel
	cloudprovider.ReservedCapacityLabels.Insert(reservationIDLabel)

	// From here on as sigs.k8s.io/karpenter/kwok's main, with the provider wrapped.
	ctx, op := operator.NewOperator()
	instanceTypes, err := kwok.ConstructInstanceTypes(ctx)
	if err != nil {
		log.FromContext(ctx).Error(err, "failed constructing instance types")
	}
	undecorated := &reservations{
		CloudProvider: kwok.NewCloudProvider(ctx, op.GetClient(), instanceTypes),
		// Read uncached: a NodeClaim created in the last scheduling round must count.
		reader: op.GetAPIReader(),
	}
	cloudProvider := overlay.Decorate(undecorated, op.GetClient(), op.InstanceTypeStore)
	clusterState := state.NewCluster(op.Clock, op.GetClient(), cloudProvider)
	op.
		WithControllers(ctx, controllers.NewControllers(
			ctx,
			op.Manager,
			op.Clock,
			op.GetClient(),
			op.EventRecorder,
			cloudProvider,
			undecorated,
			clusterState,
			op.InstanceTypeStore,
		)...).Start(ctx)
}

// reservations is the kwok provider with each reserved offering's capacity less
// what is launched into it.
type reservations struct {
	*kwok.CloudProvider
	reader client.Reader
}

// GetInstanceTypes returns kwok's instance types; those with a reserved offering are
// copies whose ReservationCapacity is what remains, unavailable at 0.
func (r *reservations) GetInstanceTypes(ctx context.Context, nodePool *v1.NodePool) ([]*cloudprovider.InstanceType, error) {
	its, err := r.CloudProvider.GetInstanceTypes(ctx, nodePool)
	if err != nil {
		return nil, err
	}
	var used map[string]int
	out := make([]*cloudprovider.InstanceType, len(its))
	for i, it := range its {
		out[i] = it
		if !slices.ContainsFunc(it.Offerings, isReserved) {
			continue
		}
		if used == nil {
			if used, err = r.launched(ctx); err != nil {
				return nil, err
			}
		}
		cp := it.DeepCopy()
		for _, o := range cp.Offerings {
			if isReserved(o) {
				o.ReservationCapacity = max(0, o.ReservationCapacity-used[o.ReservationID()])
				o.Available = o.ReservationCapacity > 0
			}
		}
		out[i] = cp
	}
	return out, nil
}

// launched counts the NodeClaims per reservation ID, as Karpenter pins a reserved
// NodeClaim's requirements to the reservation it launches into.
func (r *reservations) launched(ctx context.Context) (map[string]int, error) {
	var list v1.NodeClaimList
	if err := r.reader.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing NodeClaims for reservation capacity: %w", err)
	}
	used := map[string]int{}
	for _, nc := range list.Items {
		for _, req := range nc.Spec.Requirements {
			if req.Key == reservationIDLabel && len(req.Values) == 1 {
				used[req.Values[0]]++
			}
		}
	}
	return used, nil
}

func isReserved(o *cloudprovider.Offering) bool {
	return o.CapacityType() == v1.CapacityTypeReserved
}
