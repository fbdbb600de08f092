// Command floorhook is the benchmark's floor: the least a mutating webhook that places
// pods must do, run where `serve` runs (same certificate, same proxy, same call
// filters), so that `make bench` can tell what any such webhook costs a burst on the
// machine from what this project's webhook adds to it.
//
// It decodes each AdmissionReview, reads the pod's own strategy annotation, gives it
// the next seat of a counter per owner (no informers, no ledger, no API calls: not
// exact across replicas or restarts) and answers a JSON patch that sets the seat's
// term as the nodeSelector and records the seat, as serve's patch does.
//
// With WATCH_NAMESPACE (and KUBECONFIG) it also keeps a cache of that namespace's
// pods, as serve's ledger keeps one of the placed pods: the floor of a placing webhook
// that must see the pods it placed. It is ready once the cache has synced.
//
// Like serve, it answers /readyz on HEALTH_ADDRESS and profiles on METRICS_ADDRESS
// (plain HTTP), admissions on LISTEN_ADDRESS (HTTPS).
//
// Settings (environment): LISTEN_ADDRESS (host:port), TLS_CERT_FILE, TLS_KEY_FILE,
// METRICS_ADDRESS, HEALTH_ADDRESS, WATCH_NAMESPACE, KUBECONFIG.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/pprof"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	addr, cert, key := os.Getenv("LISTEN_ADDRESS"), os.Getenv("TLS_CERT_FILE"), os.Getenv("TLS_KEY_FILE")
	if addr == "" || cert == "" || key == "" {
		log.Print("floorhook: LISTEN_ADDRESS, TLS_CERT_FILE and TLS_KEY_FILE must be set")
		os.Exit(2)
	}
	h := &floor{seats: map[types.UID]int{}, strategies: map[string]*strategy.Strategy{}}
	synced := func() bool { return true }
	if ns := os.Getenv("WATCH_NAMESPACE"); ns != "" {
		var err error
		if synced, err = watchPods(ns, os.Getenv("KUBECONFIG")); err != nil {
			log.Printf("floorhook: %v", err)
			os.Exit(1)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/mutate", h.mutate)
	health := http.NewServeMux()
	health.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !synced() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	// Profiles, to compare with serve's (PROFILING=on) in `make bench`.
	metrics := http.NewServeMux()
	metrics.HandleFunc("/debug/pprof/", pprof.Index)
	metrics.HandleFunc("/debug/pprof/profile", pprof.Profile)
	for _, p := range []struct {
		env     string
		handler http.Handler
	}{{"HEALTH_ADDRESS", health}, {"METRICS_ADDRESS", metrics}} {
		if a := os.Getenv(p.env); a != "" {
			plain := &http.Server{Addr: a, Handler: p.handler, ReadHeaderTimeout: 5 * time.Second}
			go func() {
				err := plain.ListenAndServe()
				log.Printf("floorhook: %s: %v", p.env, err)
				os.Exit(1)
			}()
		}
	}
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Printf("floorhook: serving on %s", addr)
	if err := srv.ListenAndServeTLS(cert, key); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Printf("floorhook: %v", err)
		os.Exit(1)
	}
}

// floor hands out seats by a counter per owner.
type floor struct {
	mu         sync.Mutex
	seats      map[types.UID]int             // last seat given, by controller UID
	strategies map[string]*strategy.Strategy // parsed annotations
}

func (f *floor) mutate(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	body, err := io.ReadAll(io.LimitReader(r.Body, 3<<20))
	if err == nil {
		err = json.Unmarshal(body, &review)
	}
	if err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	var pod corev1.Pod
	if err := json.Unmarshal(review.Request.Object.Raw, &pod); err == nil {
		if patch := f.place(&pod, review.Request.DryRun != nil && *review.Request.DryRun); patch != nil {
			pt := admissionv1.PatchTypeJSONPatch
			resp.Patch, resp.PatchType = patch, &pt
		}
	}
	review.Request, review.Response = nil, resp
	out, err := json.Marshal(&review)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// place returns the patch for pod's next seat, or nil when it has no strategy or owner.
func (f *floor) place(pod *corev1.Pod, dryRun bool) []byte {
	raw := pod.Annotations["CustomPodScheduleStrategy"]
	var owner types.UID
	for _, ref := range pod.OwnerReferences {
		if ref.Controller != nil && *ref.Controller {
			owner = ref.UID
		}
	}
	if raw == "" || owner == "" {
		return nil
	}
	f.mu.Lock()
	s, ok := f.strategies[raw]
	if !ok {
		s, _ = strategy.Parse(raw) // nil on error: remembered, the pod is left alone
		f.strategies[raw] = s
	}
	seat := f.seats[owner] + 1
	if s != nil && !dryRun {
		f.seats[owner] = seat
	}
	f.mu.Unlock()
	if s == nil {
		return nil
	}
	term := s.TermOfSeat(seat)
	if term < 0 {
		return nil
	}
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	ops := []op{}
	if pod.Spec.NodeSelector == nil {
		ops = append(ops, op{"add", "/spec/nodeSelector", s.Terms[term].LabelMap()})
	} else {
		for _, l := range s.Terms[term].Labels {
			ops = append(ops, op{"add", "/spec/nodeSelector/" + escape(l.Key), l.Value})
		}
	}
	// The pod has annotations: its strategy is one.
	ops = append(ops, op{"add", "/metadata/annotations/" + escape(strategy.AnnotationSeat), strconv.Itoa(seat)})
	patch, err := json.Marshal(ops)
	if err != nil {
		return nil
	}
	return patch
}

// escape is a JSON pointer token (RFC 6901).
func escape(s string) string { return strings.NewReplacer("~", "~0", "/", "~1").Replace(s) }

// watchPods starts a cache of the pods of ns, asked for as protobuf (as serve asks), and
// returns whether it has synced.
func watchPods(ns, kubeconfig string) (func() bool, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building client: %w", err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	pods := factory.Core().V1().Pods().Informer()
	factory.Start(nil) // runs until the process ends
	return pods.HasSynced, nil
}
