package webhook

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"
	admissionv1 "k8s.io/api/admission/v1"
)

// maxBodyBytes caps an AdmissionReview: the API server's own request limit is 3 MiB and
// a review carries the object and, for UPDATE, the old object.
const maxBodyBytes = 7 << 20

// AdmitFunc answers one admission request.
type AdmitFunc func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse

// Handlers are the endpoints the server exposes.
type Handlers struct {
	Mutate   AdmitFunc
	Validate AdmitFunc
	// Ready returns nil once the caches have synced.
	Ready   func() error
	Metrics *Metrics
	Log     logrus.FieldLogger
}

// Mux routes /mutate, /validate, /healthz, /readyz and /metrics.
func (h *Handlers) Mux() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /mutate", h.admission("mutate", h.Mutate))
	mux.Handle("POST /validate", h.admission("validate", h.Validate))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := h.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(h.Metrics.Registry, promhttp.HandlerOpts{}))
	return h.recoverPanics(mux)
}

// admission decodes an admission.k8s.io/v1 AdmissionReview, calls admit and writes the
// review back with the request's UID. A panic inside admit admits the object unchanged
// with a warning: a bug in this webhook must not block workloads.
func (h *Handlers) admission(name string, admit AdmitFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		defer func() { h.Metrics.latency.WithLabelValues(name).Observe(time.Since(start).Seconds()) }()

		var review admissionv1.AdmissionReview
		body := http.MaxBytesReader(w, r.Body, maxBodyBytes)
		if err := json.NewDecoder(body).Decode(&review); err != nil {
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

func (h *Handlers) safeAdmit(ctx context.Context, name string, admit AdmitFunc, req *admissionv1.AdmissionRequest) (resp *admissionv1.AdmissionResponse) {
	defer func() {
		if p := recover(); p != nil {
			h.Log.WithFields(logrus.Fields{"webhook": name, "uid": req.UID, "panic": p, "stack": string(debug.Stack())}).Error("admission handler panicked")
			h.Metrics.admissions.WithLabelValues(name, OutcomeError).Inc()
			resp = allow("internal error; admitted unchanged")
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

// Serve runs an HTTPS server on ln until ctx ends, then shuts it down gracefully.
// getCertificate is consulted on every handshake, so rotated certificates are served
// without a restart.
func Serve(ctx context.Context, ln net.Listener, handler http.Handler, getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error), log logrus.FieldLogger) error {
	srv := &http.Server{
		Handler:           handler,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCertificate},
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	log.WithField("address", ln.Addr().String()).Info("serving HTTPS")
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve HTTPS: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("shut down HTTPS server: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve HTTPS: %w", err)
	}
	return nil
}
