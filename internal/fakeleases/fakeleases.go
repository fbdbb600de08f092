// Package fakeleases makes a fake clientset's Leases behave like the API server's, for
// the unit tests of the seat ledger and of admission (which runs a ledger). It is for
// tests only and imports nothing of the product.
package fakeleases

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Writes counts the Lease writes a fake API server accepted and refused.
type Writes struct{ OK, Conflicts atomic.Int64 }

// WithOptimisticConcurrency makes the fake clientset's Leases behave like the API
// server's: resourceVersion and UID are set on every write, an Update or a Delete
// naming a stale resourceVersion (or UID) is a Conflict. The fake's tracker alone
// accepts any write.
func WithOptimisticConcurrency(c *fake.Clientset) *Writes {
	var (
		mu     sync.Mutex
		rv     uint64
		counts Writes
	)
	gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
	conflict := func(name string) error {
		counts.Conflicts.Add(1)
		return apierrors.NewConflict(gvr.GroupResource(), name, errors.New("the object has been modified"))
	}
	c.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		// Update actions satisfy CreateAction too: switch on the verb.
		switch a.GetVerb() {
		case "create":
			a := a.(k8stesting.CreateAction)
			obj := a.GetObject().(*coordinationv1.Lease).DeepCopy()
			rv++
			obj.ResourceVersion, obj.UID = strconv.FormatUint(rv, 10), uuid.NewUUID()
			if err := c.Tracker().Create(gvr, obj, a.GetNamespace()); err != nil {
				return true, nil, err
			}
			counts.OK.Add(1)
			return true, obj, nil
		case "update":
			a := a.(k8stesting.UpdateAction)
			obj := a.GetObject().(*coordinationv1.Lease).DeepCopy()
			cur, err := c.Tracker().Get(gvr, a.GetNamespace(), obj.Name)
			if err != nil {
				return true, nil, err
			}
			if cur.(*coordinationv1.Lease).ResourceVersion != obj.ResourceVersion {
				return true, nil, conflict(obj.Name)
			}
			rv++
			obj.ResourceVersion, obj.UID = strconv.FormatUint(rv, 10), cur.(*coordinationv1.Lease).UID
			if err := c.Tracker().Update(gvr, obj, a.GetNamespace()); err != nil {
				return true, nil, err
			}
			counts.OK.Add(1)
			return true, obj, nil
		case "delete":
			a := a.(k8stesting.DeleteAction)
			cur, err := c.Tracker().Get(gvr, a.GetNamespace(), a.GetName())
			if err != nil {
				return true, nil, err
			}
			lease := cur.(*coordinationv1.Lease)
			if p := a.GetDeleteOptions().Preconditions; p != nil &&
				((p.UID != nil && *p.UID != lease.UID) || (p.ResourceVersion != nil && *p.ResourceVersion != lease.ResourceVersion)) {
				return true, nil, conflict(lease.Name)
			}
			counts.OK.Add(1)
			return true, nil, c.Tracker().Delete(gvr, a.GetNamespace(), a.GetName())
		}
		return false, nil, nil
	})
	return &counts
}
