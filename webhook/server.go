package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AdmitFunc answers one admission request.
type AdmitFunc func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse

// Handlers are the endpoints the server exposes.
type Handlers struct {
	Mutate   AdmitFunc
	Validate AdmitFunc
	// NotEnabled answers the validating calls for workloads in namespaces that are not
	// enabled (/validate/not-enabled, registered with scope opt-in); nil serves none.
	NotEnabled AdmitFunc
	// Ready returns nil once the caches have synced.
	Ready   func() error
	Metrics *Metrics
	Log     logrus.FieldLogger
	// Limits bound in-flight admissions and their bodies (zero values: defaults).
	Limits AdmissionLimits
	// Peer answers, at PeerPath, the seat claims other replicas forward (the ledger's
	// PeerHandler at its PeerClaimPath); nil serves none.
	Peer     http.Handler
	PeerPath string
	// Profiling serves the Go runtime's profiles at /debug/pprof/.
	Profiling bool
	// Door, when set, answers admissions only at /<token>/mutate and /<token>/validate
	// for a token it allows (admissiontoken.Keeper); any other path is 404 and its body
	// is never read. Nil serves /mutate and /validate to anyone who reaches the port.
	Door Door
}

// Door tells the API server's calls from anyone else's: only the API server (and who
// may read the webhook configurations) knows the path's token.
type Door interface {
	Allows(token string) bool
}

// Mux routes the HTTPS port: /mutate, /validate and the peers' seat claims. Probes
// are on HealthMux's port and /metrics on MetricsMux's, as in controller-runtime
// projects.
func (h *Handlers) Mux() http.Handler {
	mux := http.NewServeMux()
	// One gate for both webhooks: they share the process's memory.
	gate := newAdmissionGate(h.Limits)
	mutate := h.admission("mutate", h.Mutate, decodePodReview, gate)
	validate := h.admission("validate", h.Validate, decodeReview, gate)
	var notEnabled http.Handler
	if h.NotEnabled != nil {
		notEnabled = h.admission("validate", h.NotEnabled, decodeReview, gate)
	}
	if h.Door != nil {
		mux.Handle("POST /{token}/mutate", h.behindDoor("mutate", mutate))
		mux.Handle("POST /{token}/validate", h.behindDoor("validate", validate))
		if notEnabled != nil {
			// The token writer names the path by the entry (admissiontoken.Endpoint).
			mux.Handle("POST /{token}/not-enabled", h.behindDoor("validate", notEnabled))
		}
	} else {
		mux.Handle("POST /mutate", mutate)
		mux.Handle("POST /validate", validate)
		if notEnabled != nil {
			mux.Handle("POST /validate/not-enabled", notEnabled)
		}
	}
	if h.Peer != nil {
		mux.Handle("POST "+h.PeerPath, h.Peer)
	}
	return h.recoverPanics(mux)
}

// HealthMux routes the probes' port: /healthz (the process answers) and /readyz (503
// with Ready's error, which names what it waits for).
func (h *Handlers) HealthMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := h.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	return h.recoverPanics(mux)
}

// MetricsMux routes the metrics port: /metrics and, with Profiling, /debug/pprof/.
func (h *Handlers) MetricsMux() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(h.Metrics.Registry, promhttp.HandlerOpts{}))
	if h.Profiling {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return h.recoverPanics(mux)
}

// behindDoor serves next only when the path's token opens the door: a forged review
// sent by anyone who does not know it is 404 Not Found, as any unknown path, before its
// body is read or any seat is looked at.
func (h *Handlers) behindDoor(name string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.Door.Allows(r.PathValue("token")) {
			h.Metrics.refused.WithLabelValues(name, strconv.Itoa(http.StatusNotFound)).Inc()
			http.NotFound(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// reviewDecoder decodes the body of an admission call into review.
type reviewDecoder func(body []byte, review *admissionv1.AdmissionReview) error

// admission reads an admission.k8s.io/v1 AdmissionReview (at most MaxBodyBytes),
// decodes it once with decode, calls admit and writes the review back with the
// request's UID. A panic inside admit admits the object unchanged with a warning: a
// bug in this webhook must not block workloads.
func (h *Handlers) admission(name string, admit AdmitFunc, decode reviewDecoder, gate *admissionGate) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		defer func() { h.Metrics.latency.WithLabelValues(name).Observe(time.Since(start).Seconds()) }()

		leave, refused := gate.enter(r.Context(), r)
		if refused != nil {
			h.Metrics.refused.WithLabelValues(name, strconv.Itoa(refused.status)).Inc()
			refuse(w, refused)
			return
		}
		defer leave()
		var review admissionv1.AdmissionReview
		if err := readReview(w, r, decode, &review); err != nil {
			http.Error(w, "cannot decode AdmissionReview: "+err.Error(), http.StatusBadRequest)
			return
		}
		if review.Request == nil || review.APIVersion != admissionv1.SchemeGroupVersion.String() {
			http.Error(w, "expected an admission.k8s.io/v1 AdmissionReview with a request", http.StatusBadRequest)
			return
		}
		req := review.Request
		resp := h.safeAdmit(r.Context(), name, admit, req)
		resp.UID = req.UID
		out := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(&out); err != nil {
			h.Log.WithError(err).Warn("cannot write admission response")
		}
	})
}

// reviewBuffers holds request bodies between admissions: a burst then reads into
// buffers already grown to a review's size instead of growing a decoder's each time.
var reviewBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// readReview reads the request body (at most MaxBodyBytes) and decodes it into review.
func readReview(w http.ResponseWriter, r *http.Request, decode reviewDecoder, review *admissionv1.AdmissionReview) error {
	buf := reviewBuffers.Get().(*bytes.Buffer)
	defer func() {
		// A rare huge review is not kept for the next one.
		if buf.Cap() <= 256<<10 {
			buf.Reset()
			reviewBuffers.Put(buf)
		}
	}()
	if r.ContentLength > 0 && r.ContentLength <= MaxBodyBytes {
		// ReadFrom wants MinRead bytes free before each read, the one that sees EOF too.
		buf.Grow(int(r.ContentLength) + bytes.MinRead)
	}
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, MaxBodyBytes)); err != nil {
		return err
	}
	// Unmarshal copies what it keeps (RawExtension included), so the buffer is free after.
	return decode(buf.Bytes(), review)
}

// decodeReview decodes a review as it is, its object left raw.
func decodeReview(body []byte, review *admissionv1.AdmissionReview) error {
	return json.Unmarshal(body, review)
}

// podReview is an AdmissionReview of a pod whose object is decoded straight into a Pod
// (the field shadows AdmissionRequest.Object), not copied as raw bytes to be decoded
// again.
type podReview struct {
	metav1.TypeMeta `json:",inline"`
	Request         *struct {
		admissionv1.AdmissionRequest
		Object *corev1.Pod `json:"object,omitempty"`
	} `json:"request,omitempty"`
}

// decodePodReview decodes a review of a pod in one pass, the pod into the request's
// Object.Object (where PodMutator reads it).
func decodePodReview(body []byte, review *admissionv1.AdmissionReview) error {
	var in podReview
	if err := json.Unmarshal(body, &in); err != nil {
		return err
	}
	review.TypeMeta = in.TypeMeta
	if in.Request != nil {
		review.Request = &in.Request.AdmissionRequest
		if in.Request.Object != nil {
			review.Request.Object.Object = in.Request.Object
		}
	}
	return nil
}

func (h *Handlers) safeAdmit(ctx context.Context, name string, admit AdmitFunc, req *admissionv1.AdmissionRequest) (resp *admissionv1.AdmissionResponse) {
	defer func() {
		if p := recover(); p != nil {
			h.Log.WithFields(logrus.Fields{"webhook": name, "uid": req.UID, "panic": p, "stack": string(debug.Stack())}).Error("admission handler panicked")
			h.Metrics.Admitted(name, OutcomeError)
			resp = Allow("internal error; admitted unchanged")
		}
	}()
	return admit(ctx, req)
}

// recoverPanics turns a panic outside the admission path into a 500.
func (h *Handlers) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				h.Log.WithFields(logrus.Fields{"path": r.URL.Path, "panic": p, "stack": string(debug.Stack())}).Error("handler panicked")
				http.Error(w, "internal error", http.StatusInternalServerError)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// Serve runs an HTTPS server on ln until ctx ends, then shuts it down gracefully
// without a drain period (see ServeDrain).
func Serve(ctx context.Context, ln net.Listener, handler http.Handler, getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error), log logrus.FieldLogger) error {
	return ServeDrain(ctx, ln, handler, getCertificate, Drain{}, log)
}

// warningPrefix tells users which webhook a warning comes from.
const warningPrefix = "custom-kube-scheduler-webhook: "

// Allow admits the request unchanged, with warnings shown to the user by kubectl
// (each prefixed with the webhook's name).
func Allow(warnings ...string) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{Allowed: true}
	for _, w := range warnings {
		resp.Warnings = append(resp.Warnings, warningPrefix+w)
	}
	return resp
}
