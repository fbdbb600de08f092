package admissiontoken

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

const ns = "webhook-ns"

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// serving is a settable serving certificate (only its NotBefore matters here).
type serving struct {
	mu        sync.Mutex
	notBefore time.Time
}

func (s *serving) set(t time.Time) { s.mu.Lock(); defer s.mu.Unlock(); s.notBefore = t }
func (s *serving) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &tls.Certificate{Certificate: [][]byte{{0}}, Leaf: &x509.Certificate{NotBefore: s.notBefore}}, nil
}

func configurations() (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	m := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "hook"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "pods.x", ClientConfig: admissionregistrationv1.WebhookClientConfig{
			Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: "hook", Path: ptr.To("/mutate")}}}}}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "hook"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "workloads.x", ClientConfig: admissionregistrationv1.WebhookClientConfig{
			URL: ptr.To("https://127.0.0.1:9443/validate")}}}}
	return m, v
}

func paths(t *testing.T, client *fake.Clientset) (string, string) {
	t.Helper()
	ctx := context.Background()
	m, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "hook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "hook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return *m.Webhooks[0].ClientConfig.Service.Path, *v.Webhooks[0].ClientConfig.URL
}

func newKeeper(t *testing.T, client *fake.Clientset, c *clock, cert *serving) *Keeper {
	t.Helper()
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	k, err := New(Config{Client: client, Namespace: ns, SecretName: "token", MutatingConfig: "hook", ValidatingConfig: "hook",
		Certificate: cert.get, Propagation: 15 * time.Second, Overlap: 10 * time.Minute, Now: c.Now, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func token(t *testing.T, client *fake.Clientset, key string) string {
	t.Helper()
	s, err := client.CoreV1().Secrets(ns).Get(context.Background(), "token", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(s.Data[key])
}

// The first replica makes the token and writes it into both configurations' paths; a
// renewed serving certificate rotates it: every replica accepts both tokens before the
// configurations move to the new one, the old one is refused after the overlap, and a
// replica still on the older certificate never rotates back.
func TestTokenIsMadeInjectedAndRotatedWithTheCertificate(t *testing.T) {
	m, v := configurations()
	client := fake.NewClientset(m, v)
	c := &clock{now: time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)}
	oldCert, newCert := &serving{}, &serving{}
	oldCert.set(c.now.Add(-time.Hour))
	newCert.set(c.now.Add(-time.Hour))
	a, b := newKeeper(t, client, c, newCert), newKeeper(t, client, c, oldCert)
	ctx := context.Background()

	if a.Synced() || a.Allows("") || a.Allows("anything") {
		t.Fatal("a keeper that has read nothing opens the door")
	}
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	first := token(t, client, KeyToken)
	if !validToken(first) || !a.Allows(first) || a.Allows(first[1:]) || a.Allows("") {
		t.Fatalf("first token %q: allowed %v", first, a.Allows(first))
	}
	if mp, vu := paths(t, client); mp != "/"+first+"/mutate" || vu != "https://127.0.0.1:9443/"+first+"/validate" {
		t.Fatalf("paths %s, %s: want the token in both", mp, vu)
	}
	if err := b.Sync(ctx); err != nil || !b.Allows(first) {
		t.Fatalf("second replica: %v, allows the token %v", err, b.Allows(first))
	}

	// Replica a's certificate is renewed.
	c.add(time.Hour)
	newCert.set(c.now.Add(-time.Minute))
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	second := token(t, client, KeyToken)
	if second == first || !validToken(second) {
		t.Fatalf("no rotation: %q then %q", first, second)
	}
	// b, still on the old certificate, accepts both and rotates nothing.
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if token(t, client, KeyToken) != second || !b.Allows(first) || !b.Allows(second) {
		t.Fatal("the replica on the older certificate rotated again or does not accept both tokens")
	}
	if mp, _ := paths(t, client); mp != "/"+first+"/mutate" {
		t.Fatalf("the configuration moved to the new token before every replica accepts it: %s", mp)
	}
	c.add(16 * time.Second)
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if mp, vu := paths(t, client); mp != "/"+second+"/mutate" || !strings.HasSuffix(vu, "/"+second+"/validate") {
		t.Fatalf("after the propagation delay: %s, %s", mp, vu)
	}
	if !a.Allows(first) || !b.Allows(first) {
		t.Fatal("the previous token is refused within the overlap: reviews the API server sent on the old path would fail")
	}
	c.add(10 * time.Minute)
	for _, k := range []*Keeper{a, b} {
		if err := k.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if k.Allows(first) || !k.Allows(second) {
			t.Fatal("after the overlap: the previous token still opens the door, or the current one does not")
		}
	}
}

// A Secret the chart created empty is filled in; one holding no valid token too.
func TestEmptySecretIsFilledIn(t *testing.T) {
	client := fake.NewClientset()
	c := &clock{now: time.Now()}
	k := newKeeper(t, client, c, &serving{})
	ctx := context.Background()
	if err := k.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := client.CoreV1().Secrets(ns).Get(ctx, "token", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data = map[string][]byte{KeyToken: []byte("short")}
	if _, err := client.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := k.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := token(t, client, KeyToken); !validToken(got) || k.Allows("short") || !k.Allows(got) {
		t.Fatalf("a short token was kept: %q", got)
	}
}

// While the webhook's Deployment rolls from or to a release without the door, the
// configurations carry plain paths and the keeper answers them (Plain); once only pods
// with the door are left, the token goes into the paths, and plain paths are still
// answered for the propagation delay, then no more.
func TestDoorlessReplicasKeepThePathsPlain(t *testing.T) {
	m, v := configurations()
	withDoor := func(name string, door bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "hook"}}}
		if door {
			p.Labels[LabelDoor] = "token"
		}
		return p
	}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: ns}}
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "hook"}}
	d.Spec.Template.Labels = map[string]string{"app": "hook", LabelDoor: "token"}
	old := withDoor("old-0", false)
	client := fake.NewClientset(m, v, d, old, withDoor("new-0", true))
	c := &clock{now: time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)}
	k := newKeeper(t, client, c, &serving{})
	k.cfg.Doorless = DeploymentDoorless(client, ns, "hook")
	ctx := context.Background()

	// An upgrade from a door-less release: its pod is still there.
	if err := k.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if mp, vu := paths(t, client); mp != "/mutate" || vu != "https://127.0.0.1:9443/validate" || !k.Plain() {
		t.Fatalf("a door-less pod serves: paths %s, %s, plain %v; want plain", mp, vu, k.Plain())
	}
	// Its last pod is gone: the token goes in; plain answered for the propagation delay.
	if err := client.CoreV1().Pods(ns).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.add(5 * time.Second)
	if err := k.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	tok := token(t, client, KeyToken)
	if mp, _ := paths(t, client); mp != "/"+tok+"/mutate" || !k.Plain() {
		t.Fatalf("only pods with the door: path %s, plain %v; want the token, plain for a while", mp, k.Plain())
	}
	c.add(20 * time.Second)
	if k.Plain() {
		t.Fatal("plain paths still answered after the propagation delay")
	}
	// A rollback to the door-less release: its template has no door label.
	d.Spec.Template.Labels = map[string]string{"app": "hook"}
	if _, err := client.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := k.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if mp, vu := paths(t, client); mp != "/mutate" || vu != "https://127.0.0.1:9443/validate" || !k.Plain() {
		t.Fatalf("rolling back to a door-less release: paths %s, %s, plain %v; want plain", mp, vu, k.Plain())
	}
}

// A keeper that cannot tell whether door-less replicas serve (its Deployment unreadable)
// writes the token as without them: a fresh install must not stay at plain paths.
func TestDoorlessUnknownStillWritesTheToken(t *testing.T) {
	m, v := configurations()
	client := fake.NewClientset(m, v)
	c := &clock{now: time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)}
	k := newKeeper(t, client, c, &serving{})
	k.cfg.Doorless = DeploymentDoorless(client, ns, "missing")
	if err := k.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if mp, _ := paths(t, client); mp != "/"+token(t, client, KeyToken)+"/mutate" || k.Plain() {
		t.Fatalf("Deployment unreadable: path %s, plain %v; want the token", mp, k.Plain())
	}
}

// A plain-path call that comes before this replica's next Sync saw why (another replica
// wrote the plain paths) is answered once a check finds door-less replicas; checks are
// at most one a second.
func TestPlainNowChecksAtOnce(t *testing.T) {
	m, v := configurations()
	client := fake.NewClientset(m, v)
	c := &clock{now: time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)}
	k := newKeeper(t, client, c, &serving{})
	checks, doorless := 0, false
	k.cfg.Doorless = func(context.Context) (bool, error) { checks++; return doorless, nil }
	ctx := context.Background()
	if k.PlainNow(ctx) || checks != 1 {
		t.Fatalf("no door-less replica: PlainNow true or %d checks", checks)
	}
	doorless = true
	if k.PlainNow(ctx) || checks != 1 {
		t.Fatalf("within a second of the last check: PlainNow true or %d checks, want no new check", checks)
	}
	c.add(time.Second)
	if !k.PlainNow(ctx) || checks != 2 || !k.Plain() {
		t.Fatalf("door-less replicas serve: PlainNow false or %d checks", checks)
	}
}
