package imagearch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Limits of what one registry answer may cost. Every request of a lookup (the ping, a
// token fetch, the manifest, the config, and every redirect) passes the one guard
// transport that enforces them.
const (
	// maxBodyBytes bounds a successful answer: a manifest, an image config or a token.
	// The OCI distribution spec asks registries to accept manifests of 4 MiB.
	maxBodyBytes = 4 << 20
	// maxErrorBodyBytes bounds what is read of an error answer (the rest is dropped);
	// it is never shown or kept: errors carry the registry and the status only.
	maxErrorBodyBytes = 16 << 10
	// maxRedirects bounds the redirects one request follows (blob storage needs one).
	maxRedirects = 3
	// maxHeaderBytes bounds an answer's headers.
	maxHeaderBytes = 64 << 10
	// dialTimeout, tlsTimeout and headerTimeout bound a registry that accepts a
	// connection and then says nothing: it holds a lookup slot for seconds, not for the
	// whole FetchTimeout.
	dialTimeout   = 3 * time.Second
	tlsTimeout    = 3 * time.Second
	headerTimeout = 5 * time.Second
)

// errBodyTooLarge is the read error of a successful answer over maxBodyBytes.
var errBodyTooLarge = fmt.Errorf("answer larger than %d MiB", maxBodyBytes>>20)

// refusal is the error of a request the guard refused to send: its text is ours only.
type refusal struct{ msg string }

func (e *refusal) Error() string { return e.msg }

// destinations says which addresses a registry may resolve to.
type destinations struct {
	// listed are the registries (host or host:port, lower case) an operator named: they
	// may be reached on any address.
	listed map[string]bool
	// refused are networks no unlisted registry may resolve to (the cluster's service
	// and pod ranges); loopback, link-local, unspecified and multicast always are.
	refused []netip.Prefix
}

// allowedHost reports whether addr (host:port, as dialled) is a listed registry.
func (d *destinations) allowedHost(addr string) bool {
	addr = strings.ToLower(addr)
	if d.listed[addr] {
		return true
	}
	host, port, err := net.SplitHostPort(addr)
	// A registry listed without a port is reached on the scheme's default one.
	return err == nil && (port == "443" || port == "80") && d.listed[host]
}

// permitted reports whether an unlisted registry may be reached at ip.
func (d *destinations) permitted(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return false
	}
	for _, p := range d.refused {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// dial connects to addr only at an address the registry may use: the name is resolved
// here and each address checked before it is dialled, so a name that resolves
// differently a moment later (DNS rebinding) cannot slip through.
// connect makes the connection once the address is checked.
func (d *destinations) dial(connect func(ctx context.Context, network, addr string) (net.Conn, error), resolver *net.Resolver) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if d.allowedHost(addr) {
			return connect(ctx, network, addr)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		var ips []netip.Addr
		if ip, err := netip.ParseAddr(host); err == nil {
			ips = []netip.Addr{ip}
		} else if ips, err = resolver.LookupNetIP(ctx, "ip", host); err != nil {
			return nil, fmt.Errorf("resolve registry %s: %w", host, err)
		}
		var lastErr error
		for _, ip := range ips {
			if !d.permitted(ip) {
				continue
			}
			conn, err := connect(ctx, network, net.JoinHostPort(ip.Unmap().String(), port))
			if err == nil {
				return conn, nil
			}
			lastErr = err
		}
		if lastErr != nil {
			return nil, lastErr
		}
		// The host is left out: after a redirect it is the registry's word.
		return nil, &refusal{"refused to connect to a loopback, link-local or cluster-internal address (a registry there must be listed in IMAGE_INTERNAL_REGISTRIES)"}
	}
}

// newBaseTransport is base (cloned; default: http.DefaultTransport's settings) with
// the registry dialer and the time and header limits. base's own DialContext, if any,
// makes the connections once the address is checked (tests map names to loopback).
func newBaseTransport(base *http.Transport, d *destinations) *http.Transport {
	var t *http.Transport
	if base != nil {
		t = base.Clone()
	} else if dt, ok := http.DefaultTransport.(*http.Transport); ok {
		t = dt.Clone()
	} else {
		t = &http.Transport{Proxy: http.ProxyFromEnvironment}
	}
	connect := (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext
	if t.DialContext != nil {
		connect = t.DialContext
	}
	t.DialContext = d.dial(connect, net.DefaultResolver)
	t.DialTLSContext = nil // TLS runs over the checked connection
	if t.TLSHandshakeTimeout <= 0 || t.TLSHandshakeTimeout > tlsTimeout {
		t.TLSHandshakeTimeout = tlsTimeout
	}
	if t.ResponseHeaderTimeout <= 0 || t.ResponseHeaderTimeout > headerTimeout {
		t.ResponseHeaderTimeout = headerTimeout
	}
	if t.MaxResponseHeaderBytes <= 0 || t.MaxResponseHeaderBytes > maxHeaderBytes {
		t.MaxResponseHeaderBytes = maxHeaderBytes
	}
	return t
}

// guard is the one RoundTripper every registry request passes (remote.WithTransport):
// plain HTTP only to registries listed as insecure, at most maxRedirects redirects, and
// every answer's body bounded.
type guard struct {
	next     http.RoundTripper
	insecure map[string]bool
}

// RoundTrip sends req within the limits.
func (g *guard) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !g.insecure[strings.ToLower(req.URL.Host)] {
		closeBody(req)
		return nil, &refusal{"plain HTTP refused: the registry is not in IMAGE_INSECURE_REGISTRIES"}
	}
	// http.Client links a redirected request to the answer that redirected it.
	hops := 0
	for r := req; r.Response != nil && r.Response.Request != nil; r = r.Response.Request {
		hops++
	}
	if hops > maxRedirects {
		closeBody(req)
		return nil, &refusal{fmt.Sprintf("more than %d redirects from the registry", maxRedirects)}
	}
	resp, err := g.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if resp.ContentLength > maxBodyBytes {
			_ = resp.Body.Close()
			return nil, &refusal{errBodyTooLarge.Error()}
		}
		resp.Body = &boundedBody{rc: resp.Body, left: maxBodyBytes, err: errBodyTooLarge}
		return resp, nil
	}
	// An error answer is cut short silently: only its status is ever used.
	resp.Body = &boundedBody{rc: resp.Body, left: maxErrorBodyBytes, err: io.EOF}
	return resp, nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// boundedBody reads at most left bytes of rc, then answers err.
type boundedBody struct {
	rc   io.ReadCloser
	left int64
	err  error
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		if b.err == io.EOF {
			return 0, io.EOF
		}
		// One byte more tells a body of exactly the limit from a longer one.
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n == 0 {
			return 0, io.EOF
		}
		return 0, b.err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }

// ParseNetworks reads comma-separated CIDRs (IMAGE_REFUSED_NETWORKS).
func ParseNetworks(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("network %q: want a CIDR such as 10.100.0.0/16: %w", s, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// isTimeout reports whether err is a time-out of the network or of a context.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// statusText is "HTTP 404" for a status code.
func statusText(code int) string { return "HTTP " + strconv.Itoa(code) }
