// Package ownership ties the objects serve creates at runtime (its Leases: seat records,
// unavailability records, the leader-election Lease) to the webhook's own Deployment, so
// that the API server's garbage collector deletes them when the Deployment goes
// (`helm uninstall`, `kubectl delete -f`). The Leases live in the Deployment's namespace,
// as owner references to a namespaced owner require.
package ownership

import (
	"context"
	"fmt"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Owner is the object the runtime objects belong to. The zero Owner owns nothing:
// Apply then changes nothing (a webhook run outside a Deployment, e.g. in tests).
type Owner struct {
	ref *metav1.OwnerReference
}

// Deployment is the Owner of a Deployment by name and UID. It is not a controller
// reference, and it does not block the owner's deletion (that would need delete
// permission on Deployments).
func Deployment(name string, uid types.UID) Owner {
	return Owner{ref: &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name, UID: uid}}
}

// Resolve reads the Deployment name in namespace and returns it as the Owner; an empty
// name gives the zero Owner.
func Resolve(ctx context.Context, client kubernetes.Interface, namespace, name string) (Owner, error) {
	if name == "" {
		return Owner{}, nil
	}
	d, err := client.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Owner{}, fmt.Errorf("reading the owner Deployment %s/%s (OWNER_DEPLOYMENT): %w", namespace, name, err)
	}
	return Deployment(d.Name, d.UID), nil
}

// Adopt resolves the Deployment name in namespace as the Owner (Resolve) and adopts
// the Leases each selector matches that an earlier version wrote without the reference
// (an upgrade): deleting the Deployment, as helm uninstall does, then has the garbage
// collector delete them too.
func Adopt(ctx context.Context, client kubernetes.Interface, namespace, name string, log logrus.FieldLogger, selectors ...string) (Owner, error) {
	owner, err := Resolve(ctx, client, namespace, name)
	if err != nil {
		return owner, err
	}
	for _, selector := range selectors {
		n, err := owner.AdoptLeases(ctx, client, namespace, selector)
		if err != nil {
			return owner, err
		}
		if n > 0 {
			log.WithFields(logrus.Fields{"owner": owner.String(), "leases": n, "selector": selector}).Info("adopted Leases of an earlier version")
		}
	}
	return owner, nil
}

// IsZero reports whether o owns nothing.
func (o Owner) IsZero() bool { return o.ref == nil }

// String names the owner for logs.
func (o Owner) String() string {
	if o.ref == nil {
		return "none"
	}
	return fmt.Sprintf("%s/%s (%s)", o.ref.Kind, o.ref.Name, o.ref.UID)
}

// Apply adds o's reference to meta unless meta already has it, and reports whether it
// changed meta. A reference to an earlier Deployment of the same name (a reinstall) is
// replaced, so objects written before carry the live owner after their next write.
func (o Owner) Apply(meta *metav1.ObjectMeta) bool {
	if o.ref == nil {
		return false
	}
	for i, r := range meta.OwnerReferences {
		if r.APIVersion != o.ref.APIVersion || r.Kind != o.ref.Kind || r.Name != o.ref.Name {
			continue
		}
		if r.UID == o.ref.UID {
			return false
		}
		meta.OwnerReferences[i] = *o.ref
		return true
	}
	meta.OwnerReferences = append(meta.OwnerReferences, *o.ref)
	return true
}

// AdoptLeases adds o's reference to every Lease in namespace that selector (a label
// selector) matches and lacks it: records an earlier version wrote without one (an
// upgrade) are then deleted with the owner too. A Lease written meanwhile (a conflict)
// is left to its writer, which sets the reference itself. It returns how many it adopted.
func (o Owner) AdoptLeases(ctx context.Context, client kubernetes.Interface, namespace, selector string) (int, error) {
	if o.ref == nil {
		return 0, nil
	}
	leases := client.CoordinationV1().Leases(namespace)
	list, err := leases.List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return 0, fmt.Errorf("listing Leases %q in %s to adopt: %w", selector, namespace, err)
	}
	adopted := 0
	for i := range list.Items {
		lease := &list.Items[i]
		if !o.Apply(&lease.ObjectMeta) {
			continue
		}
		_, err := leases.Update(ctx, lease, metav1.UpdateOptions{})
		switch {
		case err == nil:
			adopted++
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		default:
			return adopted, fmt.Errorf("adopting Lease %s/%s: %w", namespace, lease.Name, err)
		}
	}
	return adopted, nil
}
