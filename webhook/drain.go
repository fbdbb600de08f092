package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
)

// Drain says how the server stops. A webhook that closes its port at once fails every
// admission the API server still sends it until the endpoint removal reaches the API
// server (pods then go through unplaced under failurePolicy Ignore): instead, readiness
// drops first, the server keeps serving for Period, then stops accepting and lets
// in-flight requests finish (at most Timeout).
type Drain struct {
	// Period is how long the server keeps serving after the stop signal.
	Period time.Duration
	// Timeout bounds the wait for in-flight requests after Period.
	Timeout time.Duration
	// Begin is called once, when the stop signal arrives (e.g. to fail /readyz).
	Begin func()
	// End is called once, after Period, while the server still answers and before it
	// stops taking connections (e.g. a last hand-over its peers can still see).
	End func()
}

// ServeDrain runs an HTTPS server on ln until stop ends, then drains as d says.
// getCertificate is consulted on every handshake, so rotated certificates are served
// without a restart.
func ServeDrain(stop context.Context, ln net.Listener, handler http.Handler, getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error), d Drain, log logrus.FieldLogger) error {
	var draining atomic.Bool
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if draining.Load() {
				// Each connection closes after its current request (HTTP/2: a graceful
				// GOAWAY), so clients that keep connections open (the API server does)
				// reconnect to a replica that stays.
				w.Header().Set("Connection", "close")
			}
			handler.ServeHTTP(w, r)
		}),
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12, GetCertificate: getCertificate,
			// Asked, not required: other replicas present one on seat claims
			// (peerauth.Require); the API server and probes present none.
			ClientAuth: tls.RequestClientCert,
		},
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
	case <-stop.Done():
	}
	if d.Begin != nil {
		d.Begin()
	}
	if d.Period > 0 {
		// Not SetKeepAlivesEnabled(false): it closes idle HTTP/1.1 connections at once,
		// and a client sending a request on one at that moment gets EOF (seen in e2e:
		// the balancer's calls failed). Idle connections stay open until Shutdown.
		draining.Store(true)
		log.WithField("drain", d.Period.String()).Info("stop signal: not ready; serving until the endpoint removal has spread")
		time.Sleep(d.Period)
	}
	if d.End != nil {
		d.End()
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	shutdown, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("shut down HTTPS server: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve HTTPS: %w", err)
	}
	log.Info("in-flight requests finished; stopped")
	return nil
}

// ServePlain runs a plain HTTP server (metrics, probes) on ln until stop ends, then
// shuts it down, waiting up to 5 s for requests in flight. what names it in the log.
func ServePlain(stop context.Context, ln net.Listener, handler http.Handler, what string, log logrus.FieldLogger) error {
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		// Long enough for a 30 s CPU profile (PROFILING=on on the metrics port).
		WriteTimeout:   2 * time.Minute,
		IdleTimeout:    90 * time.Second,
		MaxHeaderBytes: 64 << 10,
	}
	log.WithFields(logrus.Fields{"address": ln.Addr().String(), "serves": what}).Info("serving HTTP")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", what, err)
	case <-stop.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("shut down %s server: %w", what, err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", what, err)
	}
	return nil
}
