//go:build e2e

package deploytest

// Which requests does the API server send to the webhook? The rendered webhook
// configurations (deploy/manifests, i.e. the chart's defaults) are registered under a
// test name with their rules, namespaceSelector, objectSelector and matchConditions
// unchanged, but pointed at a recording endpoint in this process. Every case is a
// server-side dry-run create: admission webhooks run for it (sideEffects: None) and the
// call has happened by the time the create returns, so each case is checked at once.
//
//	KUBECONFIG=... go test -tags e2e ./deploy/test/ -run E2E -v

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/webhook/admissiontoken"
)

const (
	defaultManifest = "../manifests/custom-kube-scheduler-webhook.yaml"
	ownNamespace    = "custom-kube-scheduler-webhook"
	strategyKey     = "CustomPodScheduleStrategy"
	strategyAlias   = "custom-pod-schedule-strategy"
	strategy        = "karpenter.sh/capacity-type=on-demand,base=1:karpenter.sh/capacity-type=spot"
)

// recorder is the webhook endpoint: it admits everything and remembers who asked.
type recorder struct {
	mu   sync.Mutex
	seen map[string]int // "path namespace/name"
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(req.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "bad review", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.seen[req.URL.Path+" "+review.Request.Namespace+"/"+review.Request.Name]++
	r.mu.Unlock()
	review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	review.Request = nil
	_ = json.NewEncoder(w).Encode(&review)
}

func (r *recorder) called(path, ns, name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[path+" "+ns+"/"+name] > 0
}

// serve starts the recorder on 127.0.0.1 with a fresh CA; it returns the base URL and
// the CA bundle.
func serve(t *testing.T, rec *recorder) (string, []byte) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "deploytest-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: rec, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "https://" + ln.Addr().String(), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}

// loadConfigs reads the two webhook configurations from the rendered manifest.
func loadConfigs(t *testing.T) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	t.Helper()
	manifest := os.Getenv("DEPLOYTEST_MANIFEST") // another rendering of the chart
	if manifest == "" {
		manifest = defaultManifest
	}
	raw, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatalf("reading %s: %v", manifest, err)
	}
	var m *admissionregistrationv1.MutatingWebhookConfiguration
	var v *admissionregistrationv1.ValidatingWebhookConfiguration
	for _, doc := range bytes.Split(raw, []byte("\n---\n")) {
		var head metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("parsing %s: %v", manifest, err)
		}
		switch head.Kind {
		case "MutatingWebhookConfiguration":
			m = &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(doc, m); err != nil {
				t.Fatalf("parsing mutating configuration: %v", err)
			}
		case "ValidatingWebhookConfiguration":
			v = &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(doc, v); err != nil {
				t.Fatalf("parsing validating configuration: %v", err)
			}
		}
	}
	// Scope opt-in (the default): an entry per namespace label, the validating
	// not-enabled entry, and the policies entry.
	if m == nil || v == nil || len(m.Webhooks) != 2 || len(v.Webhooks) != 4 {
		t.Fatalf("%s: want a mutating configuration with 2 webhooks and a validating one with 4", manifest)
	}
	return m, v
}

func pod(ns, name string, annotations, labels map[string]string, owner string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if owner != "" {
		kind, apiVersion := owner, "apps/v1"
		p.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: apiVersion, Kind: kind, Name: "owner", UID: "00000000-0000-0000-0000-000000000001",
			Controller: ptr.To(true),
		}}
	}
	return p
}

// mirror makes p look like a kubelet's mirror pod (the API requires a node name).
func mirror(p *corev1.Pod) *corev1.Pod {
	p.Spec.NodeName = "node-a"
	return p
}

func deployment(ns, name string, meta, template map[string]string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: meta},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: template},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
}

func TestE2EWebhookSelectors(t *testing.T) {
	kubeconfig := os.Getenv("KUBECONFIG")
	if kubeconfig == "" {
		t.Skip("KUBECONFIG not set")
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(restCfg)
	ctx := context.Background()
	suffix := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffff)
	ns := "deploytest-" + suffix

	// The default scope is opt-in: ns carries today's label (the webhook's own namespace
	// too, and stays excluded all the same), nsOriginal the original project's, nsBoth
	// both, nsOff none.
	enabled := map[string]string{"custom-kube-scheduler-webhook.io/enabled": "true"}
	original := map[string]string{"custom-kube-scheduler-webhook": "enabled"}
	nsOriginal, nsBoth, nsOff := ns+"-original", ns+"-both", ns+"-off"
	for name, labels := range map[string]map[string]string{
		ns: enabled, ownNamespace: enabled, nsOriginal: original, nsOff: nil,
		nsBoth: {"custom-kube-scheduler-webhook.io/enabled": "true", "custom-kube-scheduler-webhook": "enabled"},
	} {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
		switch {
		case err == nil:
			t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		case !apierrors.IsAlreadyExists(err):
			t.Fatalf("creating namespace %s: %v", name, err)
		}
	}

	rec := &recorder{seen: map[string]int{}}
	base, ca := serve(t, rec)
	m, v := loadConfigs(t)
	m.ObjectMeta = metav1.ObjectMeta{Name: "deploytest-" + suffix}
	v.ObjectMeta = metav1.ObjectMeta{Name: "deploytest-" + suffix}
	// Every entry (one per opt-in label, and the validating not-enabled one) to the
	// recorder, at the path the webhook gives it after its token (the chart renders none).
	for i := range m.Webhooks {
		path := "/" + admissiontoken.Endpoint(false, m.Webhooks[i].Name)
		m.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: ptr.To(base + path), CABundle: ca}
	}
	for i := range v.Webhooks {
		path := "/" + admissiontoken.Endpoint(true, v.Webhooks[i].Name)
		v.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: ptr.To(base + path), CABundle: ca}
	}
	api := cs.AdmissionregistrationV1()
	if _, err := api.MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatalf("registering mutating configuration: %v", err)
	}
	t.Cleanup(func() {
		_ = api.MutatingWebhookConfigurations().Delete(context.Background(), m.Name, metav1.DeleteOptions{})
	})
	if _, err := api.ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{}); err != nil {
		t.Fatalf("registering validating configuration: %v", err)
	}
	t.Cleanup(func() {
		_ = api.ValidatingWebhookConfigurations().Delete(context.Background(), v.Name, metav1.DeleteOptions{})
	})

	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	createPod := func(p *corev1.Pod) {
		t.Helper()
		if _, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, dry); err != nil {
			t.Fatalf("dry-run create pod %s/%s: %v", p.Namespace, p.Name, err)
		}
	}
	createDeployment := func(d *appsv1.Deployment) {
		t.Helper()
		if _, err := cs.AppsV1().Deployments(d.Namespace).Create(ctx, d, dry); err != nil {
			t.Fatalf("dry-run create deployment %s/%s: %v", d.Namespace, d.Name, err)
		}
	}

	// The API server picks up new configurations through a watch: wait for both.
	i := 0
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		i++
		name := fmt.Sprintf("canary-%d", i)
		createPod(pod(ns, name, map[string]string{strategyKey: strategy}, nil, ""))
		createDeployment(deployment(ns, name, map[string]string{strategyKey: strategy}, nil))
		return rec.called("/mutate", ns, name) && rec.called("/validate", ns, name), nil
	})
	if err != nil {
		t.Fatalf("webhook configurations never became active: %v", err)
	}

	strat := map[string]string{strategyKey: strategy}
	podCases := []struct {
		name string
		pod  *corev1.Pod
		call bool
	}{
		{"strategy-on-pod", pod(ns, "strategy-on-pod", strat, nil, ""), true},
		{"alias-on-pod", pod(ns, "alias-on-pod", map[string]string{strategyAlias: strategy}, nil, ""), true},
		{"replicaset-pod", pod(ns, "replicaset-pod", nil, nil, "ReplicaSet"), true},
		{"statefulset-pod", pod(ns, "statefulset-pod", nil, nil, "StatefulSet"), true},
		{"bare-pod-without-strategy", pod(ns, "bare-pod-without-strategy", nil, nil, ""), false},
		{"job-pod", pod(ns, "job-pod", nil, nil, "Job"), true},
		{"daemonset-pod", pod(ns, "daemonset-pod", strat, nil, "DaemonSet"), false},
		{"seated-pod", pod(ns, "seated-pod", map[string]string{strategyKey: strategy, "custom-kube-scheduler-webhook.io/seat": "3"}, nil, "ReplicaSet"), false},
		{"mirror-pod", mirror(pod(ns, "mirror-pod", map[string]string{strategyKey: strategy, "kubernetes.io/config.mirror": "x"}, nil, "")), false},
		{"managed-label-pod", pod(ns, "managed-label-pod", strat, map[string]string{"custom-kube-scheduler-webhook.io/managed": "true"}, "ReplicaSet"), false},
		{"kube-system-pod", pod("kube-system", "kube-system-pod", strat, nil, "ReplicaSet"), false},
		{"own-namespace-pod", pod(ownNamespace, "own-namespace-pod", strat, nil, "ReplicaSet"), false},
	}
	for _, c := range podCases {
		createPod(c.pod)
		if got := rec.called("/mutate", c.pod.Namespace, c.pod.Name); got != c.call {
			t.Errorf("pod %s: webhook called = %v, want %v", c.name, got, c.call)
		}
	}

	deployCases := []struct {
		name     string
		meta     map[string]string
		template map[string]string
		call     bool
	}{
		{"strategy-on-deployment", strat, nil, true},
		{"strategy-on-template", nil, strat, true},
		{"alias-on-template", nil, map[string]string{strategyAlias: strategy}, true},
		{"no-strategy", map[string]string{"unrelated": "x"}, map[string]string{"also": "unrelated"}, false},
	}
	for _, c := range deployCases {
		createDeployment(deployment(ns, c.name, c.meta, c.template))
		if got := rec.called("/validate", ns, c.name); got != c.call {
			t.Errorf("deployment %s: webhook called = %v, want %v", c.name, got, c.call)
		}
	}
	// Jobs and CronJobs carrying a strategy, on the object, a CronJob's job template or
	// the pod template, are sent (to be checked); others not.
	podSpec := corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	withTemplate := func(ann map[string]string) corev1.PodTemplateSpec {
		t := *podSpec.DeepCopy()
		t.Annotations = ann
		return t
	}
	for _, c := range []struct {
		name string
		job  *batchv1.Job
		call bool
	}{
		{"job-strategy", &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "job-strategy", Annotations: strat}, Spec: batchv1.JobSpec{Template: withTemplate(nil)}}, true},
		{"job-template-strategy", &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "job-template-strategy"}, Spec: batchv1.JobSpec{Template: withTemplate(strat)}}, true},
		{"job-no-strategy", &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "job-no-strategy"}, Spec: batchv1.JobSpec{Template: withTemplate(nil)}}, false},
		{"cronjob-own-job", &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cronjob-own-job", Annotations: strat,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "CronJob", Name: "nightly", UID: "00000000-0000-0000-0000-000000000002", Controller: ptr.To(true)}}},
			Spec: batchv1.JobSpec{Template: withTemplate(nil)}}, false},
	} {
		if _, err := cs.BatchV1().Jobs(ns).Create(ctx, c.job, dry); err != nil {
			t.Fatalf("dry-run create job %s: %v", c.name, err)
		}
		if got := rec.called("/validate", ns, c.name); got != c.call {
			t.Errorf("job %s: webhook called = %v, want %v", c.name, got, c.call)
		}
	}
	for _, c := range []struct {
		name          string
		job, template map[string]string
		call          bool
	}{
		{"cronjob-job-template-strategy", strat, nil, true},
		{"cronjob-pod-template-strategy", nil, strat, true},
		{"cronjob-no-strategy", nil, nil, false},
	} {
		cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.name}, Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *",
			JobTemplate: batchv1.JobTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: c.job}, Spec: batchv1.JobSpec{Template: withTemplate(c.template)}}}}
		if _, err := cs.BatchV1().CronJobs(ns).Create(ctx, cj, dry); err != nil {
			t.Fatalf("dry-run create cronjob %s: %v", c.name, err)
		}
		if got := rec.called("/validate", ns, c.name); got != c.call {
			t.Errorf("cronjob %s: webhook called = %v, want %v", c.name, got, c.call)
		}
	}
	createDeployment(deployment("kube-system", "kube-system-deployment", strat, nil))
	if rec.called("/validate", "kube-system", "kube-system-deployment") || rec.called("/not-enabled", "kube-system", "kube-system-deployment") {
		t.Error("deployment in kube-system: webhook called")
	}

	// Scope opt-in: either label, each pod once; an unlabelled namespace's pods never,
	// its annotated workloads only to /not-enabled (which warns).
	for _, n := range []string{nsOriginal, nsBoth, nsOff} {
		createPod(pod(n, "scoped", strat, nil, "ReplicaSet"))
		createDeployment(deployment(n, "scoped", strat, nil))
	}
	rec.mu.Lock()
	calls := func(path, n string) int { return rec.seen[path+" "+n+"/scoped"] }
	for _, c := range []struct {
		ns                          string
		mutate, validate, notEnable int
	}{
		{nsOriginal, 1, 1, 0},
		{nsBoth, 1, 1, 0},
		{nsOff, 0, 0, 1},
	} {
		if m, v, o := calls("/mutate", c.ns), calls("/validate", c.ns), calls("/not-enabled", c.ns); m != c.mutate || v != c.validate || o != c.notEnable {
			t.Errorf("namespace %s: calls /mutate %d, /validate %d, /not-enabled %d; want %d, %d, %d", c.ns, m, v, o, c.mutate, c.validate, c.notEnable)
		}
	}
	rec.mu.Unlock()
	if t.Failed() {
		t.Logf("calls seen: %s", strings.Join(keys(rec), ", "))
	}
}

func keys(r *recorder) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.seen))
	for k := range r.seen {
		out = append(out, k)
	}
	return out
}
