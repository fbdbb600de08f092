package karpenter

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/awslabs/operatorpkg/status"
	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

// RegistrationTimeout is how long Karpenter lets a launched NodeClaim take to register
// its node before it gives up on it and deletes it (registrationTimeout in
// sigs.k8s.io/karpenter's nodeclaim lifecycle controller, unexported; pinned by a test
// against the version in go.mod). A claim not registered by then is a failed launch,
// not one in flight.
const RegistrationTimeout = 15 * time.Minute

func nodeClaimGVR() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodeclaims"}
}

// Flight is what Karpenter is doing for the capacity a term selects: the NodeClaims
// whose nodes would carry the term's labels.
type Flight struct {
	// Launching counts the claims still on their way: not registered yet, not failed,
	// not being deleted, younger than RegistrationTimeout.
	Launching int
	// Registered counts the claims whose node registered.
	Registered int
	// Failed describes the claims that failed: their launch failed (launchFailed), or
	// they did not register within RegistrationTimeout.
	Failed []string
	// NotLaunched describes the claims whose launch failed, by the NodePool that made
	// them (label karpenter.sh/nodepool): a structured "cannot launch" (CannotLaunch).
	NotLaunched map[string][]string
	// LastProgress is the latest sign of progress among them: a claim created, launched,
	// registered or initialized (zero when there is none).
	LastProgress time.Time
}

// Progressing reports whether Karpenter is bringing capacity for the term: a claim
// on its way, or progress within the last window.
func (f Flight) Progressing(now time.Time, window time.Duration) bool {
	return f.Launching > 0 || (!f.LastProgress.IsZero() && now.Sub(f.LastProgress) < window)
}

// String says it in a few words, for Events and logs.
func (f Flight) String() string {
	s := fmt.Sprintf("%d NodeClaims launching, %d registered", f.Launching, f.Registered)
	if len(f.Failed) > 0 {
		s += fmt.Sprintf(", %d failed (%s)", len(f.Failed), f.Failed[0])
	}
	if !f.LastProgress.IsZero() {
		s += ", last progress " + f.LastProgress.UTC().Format(time.RFC3339)
	}
	return s
}

// NodeClaims watches Karpenter's NodeClaims (karpenter.sh/v1): the capacity being
// launched. The convergence loop asks it whether Karpenter is still bringing nodes for
// a term before it calls the term unavailable, so a slow launch is not read as none.
type NodeClaims struct {
	informer  cache.SharedIndexInformer
	discovery discovery.DiscoveryInterface
	tick      time.Duration
	log       logrus.FieldLogger
	state     atomic.Int32 // poolsUnknown, poolsAbsent or poolsWatching, as for NodePools
}

// NewNodeClaims returns a watcher of NodeClaims through the dynamic client; Run starts it.
func NewNodeClaims(client dynamic.Interface, disc discovery.DiscoveryInterface, log logrus.FieldLogger) (*NodeClaims, error) {
	inf, err := newTypedInformer(client, nodeClaimGVR(), 0, toNodeClaim)
	if err != nil {
		return nil, err
	}
	return &NodeClaims{informer: inf, discovery: disc, tick: time.Minute, log: log}, nil
}

// toNodeClaim converts an unstructured NodeClaim to a typed one that keeps only what
// Flight reads: labels, requirements, conditions, creation and deletion times.
func toNodeClaim(obj interface{}) (interface{}, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	nc := &karpv1.NodeClaim{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), nc); err != nil {
		return nil, fmt.Errorf("converting NodeClaim %q: %w", u.GetName(), err)
	}
	return &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: nc.Name, UID: nc.UID, ResourceVersion: nc.ResourceVersion, Labels: nc.Labels,
			CreationTimestamp: nc.CreationTimestamp, DeletionTimestamp: nc.DeletionTimestamp,
		},
		Spec:   karpv1.NodeClaimSpec{Requirements: nc.Spec.Requirements},
		Status: karpv1.NodeClaimStatus{Conditions: nc.Status.Conditions},
	}, nil
}

// Run watches NodeClaims until ctx ends; while the API is not served (Karpenter not
// installed) it looks for it again every minute, and HasSynced does not wait for it.
func (n *NodeClaims) Run(ctx context.Context) {
	for {
		ok, err := served(n.discovery, nodeClaimGVR().Resource)
		switch {
		case ok:
			n.state.Store(poolsWatching)
			n.informer.RunWithContext(ctx)
			return
		case err == nil:
			n.state.Store(poolsAbsent)
		default:
			n.log.WithError(err).Debug("looking for the NodeClaim API failed; retrying")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(n.tick):
		}
	}
}

// HasSynced reports whether NodeClaims have been listed, or their API found absent.
func (n *NodeClaims) HasSynced() bool {
	switch n.state.Load() {
	case poolsAbsent:
		return true
	case poolsWatching:
		return n.informer.HasSynced()
	}
	return false
}

// Flight summarises the NodeClaims whose nodes would carry every one of labels.
func (n *NodeClaims) Flight(labels map[string]string, now time.Time) Flight {
	var f Flight
	if n.state.Load() != poolsWatching {
		return f
	}
	for _, obj := range n.informer.GetStore().List() {
		nc, ok := obj.(*karpv1.NodeClaim)
		if !ok || !claimCarries(nc, labels) {
			continue
		}
		addClaim(&f, nc, now)
	}
	sort.Strings(f.Failed)
	for _, failed := range f.NotLaunched {
		sort.Strings(failed)
	}
	return f
}

// claimCarries reports whether the node of nc will carry every one of labels: each key
// is one of the claim's labels with that value, or one of its requirements that allows
// it. A key the claim says nothing about is not carried (Karpenter sets the well-known
// ones as requirements, and a NodePool's template labels as labels).
func claimCarries(nc *karpv1.NodeClaim, labels map[string]string) bool {
	reqs := scheduling.NewNodeSelectorRequirementsWithMinValues(nc.Spec.Requirements...)
	for k, v := range labels {
		if have, ok := nc.Labels[k]; ok {
			if !strategy.AdmitsValue(k, v, have) {
				return false
			}
			continue
		}
		// A set term is carried when the claim allows one of its values.
		if !reqs.Has(k) || !slices.ContainsFunc(strategy.SplitValues(v), reqs.Get(k).Has) {
			return false
		}
	}
	return true
}

// awaitingReconciliation is the reason of a condition not worked on yet
// (github.com/awslabs/operatorpkg/status, ConditionSet.SetUnknown), the only Unknown
// reason of Launched before Karpenter tried to launch.
const awaitingReconciliation = "AwaitingReconciliation"

// launchFailed reports whether c, a NodeClaim's Launched condition, says its launch
// failed. Karpenter v1 (v1.0 to v1.15 at least) never sets Launched=False: a failed
// launch leaves it Unknown with the cloud provider's reason (a CreateError's
// ConditionReason, else "LaunchFailed") while it retries, until LaunchTimeout (5m)
// deletes the claim; an insufficient-capacity error deletes the claim at once. False
// is taken too, should a version ever set it.
func launchFailed(c status.Condition) bool {
	switch c.Status {
	case metav1.ConditionFalse:
		return true
	case metav1.ConditionUnknown:
		return c.Reason != "" && c.Reason != awaitingReconciliation
	}
	return false
}

// addClaim counts one NodeClaim into f.
func addClaim(f *Flight, nc *karpv1.NodeClaim, now time.Time) {
	progress := func(t time.Time) {
		if t.After(f.LastProgress) {
			f.LastProgress = t
		}
	}
	for _, c := range nc.Status.Conditions {
		if c.Type == karpv1.ConditionTypeLaunched && launchFailed(c) {
			// No progress: a claim that fails to launch brings nothing.
			msg := fmt.Sprintf("nodeclaim/%s not launched (Launched=%s, %s)", nc.Name, c.Status, strings.TrimSpace(c.Reason+": "+truncate(c.Message, 160)))
			f.Failed = append(f.Failed, msg)
			if f.NotLaunched == nil {
				f.NotLaunched = map[string][]string{}
			}
			pool := nc.Labels[karpv1.NodePoolLabelKey]
			f.NotLaunched[pool] = append(f.NotLaunched[pool], msg)
			return
		}
	}
	progress(nc.CreationTimestamp.Time)
	registered := false
	for _, c := range nc.Status.Conditions {
		switch c.Type {
		case karpv1.ConditionTypeLaunched, karpv1.ConditionTypeRegistered, karpv1.ConditionTypeInitialized:
		default:
			continue
		}
		if c.Status == metav1.ConditionTrue {
			progress(c.LastTransitionTime.Time)
			registered = registered || c.Type == karpv1.ConditionTypeRegistered
		}
	}
	switch {
	case registered:
		f.Registered++
	case nc.DeletionTimestamp != nil:
	case now.Sub(nc.CreationTimestamp.Time) >= RegistrationTimeout:
		f.Failed = append(f.Failed, fmt.Sprintf("nodeclaim/%s not registered after %s", nc.Name, RegistrationTimeout))
	default:
		f.Launching++
	}
}
