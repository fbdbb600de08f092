package ownership

import (
	"context"
	"strings"
	"testing"

	logtest "github.com/sirupsen/logrus/hooks/test"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestApply(t *testing.T) {
	o := Deployment("cksw", "uid-1")
	var m metav1.ObjectMeta
	if !o.Apply(&m) || len(m.OwnerReferences) != 1 {
		t.Fatalf("first Apply: changed nothing or wrong refs %v", m.OwnerReferences)
	}
	r := m.OwnerReferences[0]
	if r.APIVersion != "apps/v1" || r.Kind != "Deployment" || r.Name != "cksw" || r.UID != "uid-1" || r.Controller != nil || r.BlockOwnerDeletion != nil {
		t.Errorf("reference %+v: want apps/v1 Deployment cksw uid-1, not a controller, not blocking", r)
	}
	if o.Apply(&m) || len(m.OwnerReferences) != 1 {
		t.Errorf("second Apply: want no change, got %v", m.OwnerReferences)
	}
	// A reinstall: same name, new UID replaces the stale reference; others are kept.
	m.OwnerReferences = append([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "u"}}, m.OwnerReferences...)
	if !Deployment("cksw", "uid-2").Apply(&m) || len(m.OwnerReferences) != 2 || m.OwnerReferences[1].UID != "uid-2" || m.OwnerReferences[0].Name != "x" {
		t.Errorf("reinstall: got %v", m.OwnerReferences)
	}
	var zero Owner
	if !zero.IsZero() || zero.Apply(&m) || zero.String() != "none" {
		t.Error("the zero Owner must change nothing")
	}
}

func TestResolve(t *testing.T) {
	ctx := context.Background()
	client := fake.NewSimpleClientset(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "cksw", Namespace: "ns", UID: "uid-9"}})
	o, err := Resolve(ctx, client, "ns", "cksw")
	if err != nil || o.ref == nil || o.ref.UID != "uid-9" {
		t.Fatalf("Resolve: %v, %v", o, err)
	}
	if o, err := Resolve(ctx, client, "ns", ""); err != nil || !o.IsZero() {
		t.Errorf("empty name: want the zero Owner, got %v, %v", o, err)
	}
	_, err = Resolve(ctx, client, "ns", "missing")
	if err == nil || !strings.Contains(err.Error(), "OWNER_DEPLOYMENT") {
		t.Errorf("missing Deployment: want an error naming OWNER_DEPLOYMENT, got %v", err)
	}
}

func TestAdoptLeases(t *testing.T) {
	ctx := context.Background()
	lease := func(name string, labels map[string]string, refs ...metav1.OwnerReference) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: labels, OwnerReferences: refs}}
	}
	o := Deployment("cksw", "uid-1")
	client := fake.NewSimpleClientset(
		lease("old-record", map[string]string{"record": "seats"}),
		lease("owned-record", map[string]string{"record": "seats"}, *o.ref),
		lease("someone-elses", map[string]string{"other": "x"}),
	)
	n, err := o.AdoptLeases(ctx, client, "ns", "record")
	if err != nil || n != 1 {
		t.Fatalf("AdoptLeases: %d, %v; want 1 adopted", n, err)
	}
	for name, want := range map[string]int{"old-record": 1, "owned-record": 1, "someone-elses": 0} {
		l, err := client.CoordinationV1().Leases("ns").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.OwnerReferences) != want {
			t.Errorf("%s: %d owner references, want %d", name, len(l.OwnerReferences), want)
		}
	}
	if n, err := (Owner{}).AdoptLeases(ctx, client, "ns", "record"); n != 0 || err != nil {
		t.Errorf("the zero Owner adopted %d (%v)", n, err)
	}
}

// Adopt resolves the Deployment and adopts what each selector matches.
func TestAdopt(t *testing.T) {
	ctx := context.Background()
	lease := func(name, label string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{label: "x"}}}
	}
	client := fake.NewSimpleClientset(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "cksw", Namespace: "ns", UID: "uid-9"}},
		lease("seats", "seat"), lease("unavailable", "unavailability"), lease("other", "other"))
	log, _ := logtest.NewNullLogger()
	o, err := Adopt(ctx, client, "ns", "cksw", log, "seat", "unavailability")
	if err != nil || o.IsZero() {
		t.Fatalf("Adopt: %v, %v", o, err)
	}
	for name, want := range map[string]int{"seats": 1, "unavailable": 1, "other": 0} {
		l, err := client.CoordinationV1().Leases("ns").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.OwnerReferences) != want {
			t.Errorf("%s: %d owner references, want %d", name, len(l.OwnerReferences), want)
		}
	}
	if _, err := Adopt(ctx, client, "ns", "missing", log, "seat"); err == nil {
		t.Error("Adopt with a missing Deployment: want an error")
	}
}
