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
			URL: ptr.To("https://127.0.0.1:9443/validate")}}, {Name: "not-enabled.workloads.x", ClientConfig: admissionregistrationv1.WebhookClientConfig{
			Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: "hook"}}}, {Name: "policies.x", ClientConfig: admissionregistrationv1.WebhookClientConfig{
			Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: "hook", Path: ptr.To("/validate/not-enabled")}}}}}
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
	first := token(t, client, keyToken)
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
	second := token(t, client, keyToken)
	if second == first || !validToken(second) {
		t.Fatalf("no rotation: %q then %q", first, second)
	}
	// b, still on the old certificate, accepts both and rotates nothing.
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if token(t, client, keyToken) != second || !b.Allows(first) || !b.Allows(second) {
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
	s.Data = map[string][]byte{keyToken: []byte("short")}
	if _, err := client.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := k.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := token(t, client, keyToken); !validToken(got) || k.Allows("short") || !k.Allows(got) {
		t.Fatalf("a short token was kept: %q", got)
	}
}

// The chart renders no path (the webhook owns the field): the keeper names each entry's
// path by its name, whatever path, if any, the entry had.
func TestPathFollowsTheEntryNotItsPath(t *testing.T) {
	m, v := configurations()
	m.Webhooks[0].ClientConfig.Service.Path = nil
	client := fake.NewClientset(m, v)
	k := newKeeper(t, client, &clock{now: time.Now()}, &serving{})
	ctx := context.Background()
	if err := k.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	tok := token(t, client, keyToken)
	mp, _ := paths(t, client)
	got, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "hook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	notEnabled, policies := *got.Webhooks[1].ClientConfig.Service.Path, *got.Webhooks[2].ClientConfig.Service.Path
	if mp != "/"+tok+"/mutate" || notEnabled != "/"+tok+"/not-enabled" || policies != "/"+tok+"/validate" {
		t.Fatalf("paths %s, %s, %s: want /<token>/mutate, /<token>/not-enabled, /<token>/validate", mp, notEnabled, policies)
	}
}
