package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Ports of a `serve` process besides its webhook port: /metrics on the webhook port +
// MetricsPortOffset, the probes on + HealthPortOffset (plain HTTP on 127.0.0.1 both).
// Webhook ports are 9443 + the cluster's port offset + a few, so the derived ports of
// every process of every cluster on the machine differ too, and stay below the
// ephemeral range.
const (
	MetricsPortOffset = 10000
	HealthPortOffset  = 20000
)

// HealthPort is the probe port of the `serve` process whose webhook port is port.
func HealthPort(port int) int { return port + HealthPortOffset }

// Serve is one `serve` process of the webhook binary, listening on 127.0.0.1:Port
// (HTTPS), 127.0.0.1:MetricsPort (/metrics) and 127.0.0.1:HealthPort (/healthz,
// /readyz). Its PID is recorded in the cluster's pids/ directory like the cluster's
// daemons, so scripts/localcluster/down.sh stops it even if the harness dies first.
type Serve struct {
	Bin  string
	Port int
	// MetricsPort and HealthPort default to Port + MetricsPortOffset and Port +
	// HealthPortOffset.
	MetricsPort, HealthPort int
	// Name names the log (logs/<Name>.log) and PID file; it must start with
	// "webhook" for down.sh to find it.
	Name string
	// Env is added to the harness's environment (LISTEN_ADDRESS, METRICS_ADDRESS and
	// HEALTH_ADDRESS are set from the ports).
	Env []string

	cluster *Cluster
	cmd     *exec.Cmd
	done    chan error
}

// NewServe describes a `serve` process of bin on port with the cluster's serving
// certificate and the admin kubeconfig; env adds or overrides settings (the last
// value of a variable wins: KUBECONFIG=<another> runs it as another user).
func (c *Cluster) NewServe(bin, name string, port int, env ...string) *Serve {
	base := []string{
		"TLS_CERT_FILE=" + c.PKI("webhook.crt"),
		"TLS_KEY_FILE=" + c.PKI("webhook.key"),
		"KUBECONFIG=" + c.Kubeconfig(),
	}
	return &Serve{
		Bin: bin, Port: port, MetricsPort: port + MetricsPortOffset, HealthPort: HealthPort(port),
		Name: name, Env: append(base, env...), cluster: c,
	}
}

// LogPath is where the process's output goes.
func (s *Serve) LogPath() string { return filepath.Join(s.cluster.Dir, "logs", s.Name+".log") }

// Running reports whether the process was started and has not been stopped or killed.
func (s *Serve) Running() bool { return s.cmd != nil }

// PID is the process ID, 0 when not running.
func (s *Serve) PID() int {
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Start runs `serve` and waits until /readyz on its health port answers 200 (caches
// synced).
func (s *Serve) Start(ctx context.Context) error {
	if s.cmd != nil {
		return fmt.Errorf("%s already running", s.Name)
	}
	if err := os.MkdirAll(filepath.Dir(s.LogPath()), 0o755); err != nil {
		return fmt.Errorf("creating log dir: %w", err)
	}
	logf, err := os.OpenFile(s.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening webhook log: %w", err)
	}
	defer logf.Close() // the child keeps its own descriptor
	// Not CommandContext: the process outlives the context of one call.
	cmd := exec.Command(s.Bin, "serve")
	cmd.Env = append(append(os.Environ(), s.Env...), fmt.Sprintf("LISTEN_ADDRESS=127.0.0.1:%d", s.Port),
		fmt.Sprintf("METRICS_ADDRESS=127.0.0.1:%d", s.MetricsPort), fmt.Sprintf("HEALTH_ADDRESS=127.0.0.1:%d", s.HealthPort))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s serve: %w", s.Bin, err)
	}
	s.cmd, s.done = cmd, make(chan error, 1)
	go func() { s.done <- cmd.Wait() }()
	if err := s.recordPID(); err != nil {
		_ = s.Kill()
		return err
	}
	if err := s.waitReady(ctx); err != nil {
		_ = s.Stop()
		return err
	}
	return nil
}

func (s *Serve) recordPID() error {
	dir := filepath.Join(s.cluster.Dir, "pids")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating pid dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, s.Name+".pid"), []byte(strconv.Itoa(s.cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return fmt.Errorf("recording webhook pid: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, s.Name+".cmd"), []byte(filepath.Base(s.Bin)+"\n"), 0o644); err != nil {
		return fmt.Errorf("recording webhook command: %w", err)
	}
	return nil
}

// URL is https://127.0.0.1:Port followed by path.
func (s *Serve) URL(path string) string { return fmt.Sprintf("https://127.0.0.1:%d%s", s.Port, path) }

// MetricsURL is http://127.0.0.1:MetricsPort followed by path.
func (s *Serve) MetricsURL(path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s", s.MetricsPort, path)
}

// HealthURL is http://127.0.0.1:HealthPort followed by path.
func (s *Serve) HealthURL(path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s", s.HealthPort, path)
}

func (s *Serve) waitReady(ctx context.Context) error {
	hc := s.cluster.HTTPClient(2 * time.Second)
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for {
		select {
		case err := <-s.done:
			s.done <- err
			return fmt.Errorf("webhook exited before becoming ready (%v); see %s", err, s.LogPath())
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.HealthURL("/readyz"), nil)
		if err != nil {
			return fmt.Errorf("building readiness request: %w", err)
		}
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("webhook not ready at %s: %w; see %s", s.HealthURL("/readyz"), ctx.Err(), s.LogPath())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Kill ends the process with SIGKILL, as a crash or an OOM kill would.
func (s *Serve) Kill() error {
	if s.cmd == nil {
		return nil
	}
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing webhook: %w", err)
	}
	<-s.done
	s.cmd = nil
	return nil
}

// ErrNotExited is what Terminate returns (wrapped) when the process was still
// running at the end of its grace period, and was SIGKILLed then.
var ErrNotExited = errors.New("did not exit within its grace period")

// Terminate ends the process as the kubelet ends a container: SIGTERM, then up to
// grace for it to drain and exit, then SIGKILL. It returns how the process exited
// (nil if it was not running), and an error if it could not be signalled or had to
// be killed (wrapping ErrNotExited).
func (s *Serve) Terminate(grace time.Duration) (*os.ProcessState, error) {
	if s.cmd == nil {
		return nil, nil
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return nil, fmt.Errorf("stopping webhook: %w", err)
	}
	select {
	case <-s.done:
		state := s.cmd.ProcessState
		s.cmd = nil
		return state, nil
	case <-time.After(grace):
		if err := s.Kill(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%s SIGKILLed after %v: %w", s.Name, grace, ErrNotExited)
	}
}

// Stop ends the process with SIGTERM, then SIGKILL after 10 s. How it exited is
// not an error.
func (s *Serve) Stop() error {
	if _, err := s.Terminate(10 * time.Second); err != nil && !errors.Is(err, ErrNotExited) {
		return err
	}
	return nil
}

// Metrics scrapes the process's /metrics.
func (s *Serve) Metrics(ctx context.Context) (Metrics, error) {
	var ms Metrics
	err := s.get(ctx, s.MetricsURL("/metrics"), 10*time.Second, func(body io.Reader) (err error) {
		ms, err = ParseMetrics(body)
		return err
	})
	return ms, err
}

// SaveProfile writes the process's /debug/pprof/<name> (serve with PROFILING=on) to
// path; query is appended as is (for example "gc=1" for a heap profile taken after
// a collection).
func (s *Serve) SaveProfile(ctx context.Context, name, query, path string) error {
	if query != "" {
		name += "?" + query
	}
	err := s.get(ctx, s.MetricsURL("/debug/pprof/"+name), time.Minute, func(body io.Reader) error {
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("saving profile: %w", err)
		}
		if _, err := io.Copy(f, body); err != nil {
			f.Close()
			return fmt.Errorf("saving profile %s: %w", path, err)
		}
		return f.Close()
	})
	if err != nil {
		return fmt.Errorf("profile %s (serve needs PROFILING=on): %w", name, err)
	}
	return nil
}

// get GETs url from the process (within timeout) and hands a 200 answer's body to read.
func (s *Serve) get(ctx context.Context, url string, timeout time.Duration, read func(io.Reader) error) error {
	hc := s.cluster.HTTPClient(timeout)
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("building request for %s: %w", url, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetching %s: status %s", url, resp.Status)
	}
	return read(resp.Body)
}
