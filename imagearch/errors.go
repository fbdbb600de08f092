package imagearch

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// RegistryError is why a registry lookup failed, in the webhook's own words: the
// registry, the HTTP status when one came, a registry error code of the distribution
// spec when the answer named one, and a reason of our own. Nothing else a registry sent
// (a body, a header, a certificate's names, a redirect's target) is in it, so warnings,
// Events, logs and the failure cache cannot echo an answer or grow with it.
type RegistryError struct {
	Registry string
	// Status is the HTTP status of the answer (0: none came).
	Status int
	// Code is a distribution-spec error code (MANIFEST_UNKNOWN...) or empty.
	Code   string
	Reason string
}

func (e *RegistryError) Error() string {
	var b strings.Builder
	b.WriteString("registry ")
	b.WriteString(e.Registry)
	if e.Status != 0 {
		b.WriteString(" answered ")
		b.WriteString(statusText(e.Status))
		if e.Code != "" {
			b.WriteString(" (" + e.Code + ")")
		}
	}
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	}
	return b.String()
}

// knownCodes are the error codes a registry's answer may name in a RegistryError.
var knownCodes = map[transport.ErrorCode]bool{
	transport.BlobUnknownErrorCode: true, transport.ManifestUnknownErrorCode: true, transport.ManifestInvalidErrorCode: true,
	transport.NameInvalidErrorCode: true, transport.NameUnknownErrorCode: true, transport.TagInvalidErrorCode: true,
	transport.UnauthorizedErrorCode: true, transport.DeniedErrorCode: true, transport.UnsupportedErrorCode: true,
	transport.TooManyRequestsErrorCode: true, transport.UnknownErrorCode: true, transport.UnavailableErrorCode: true,
}

// registryError turns an error of a registry request into a RegistryError of
// registry, keeping only what is ours to say.
func registryError(registry string, err error) *RegistryError {
	out := &RegistryError{Registry: registry}
	var (
		re      *RegistryError
		te      *transport.Error
		ref     *refusal
		dnsErr  *net.DNSError
		opErr   *net.OpError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
		verify  *tls.CertificateVerificationError
		record  tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &re):
		return re
	case errors.As(err, &te):
		out.Status = te.StatusCode
		for _, d := range te.Errors {
			if knownCodes[d.Code] {
				out.Code = string(d.Code)
				break
			}
		}
	case errors.As(err, &ref):
		out.Reason = ref.msg
	case errors.Is(err, errBodyTooLarge):
		out.Reason = errBodyTooLarge.Error()
	case isTimeout(err):
		out.Reason = "no answer in time"
	case errors.As(err, &unknown), errors.As(err, &host), errors.As(err, &invalid), errors.As(err, &verify):
		out.Reason = "its TLS certificate is not trusted"
	case errors.As(err, &record):
		out.Reason = "it does not speak TLS"
	case errors.As(err, &dnsErr):
		out.Reason = "its name does not resolve"
	case errors.As(err, &opErr):
		out.Reason = "cannot connect"
	default:
		out.Reason = "unreadable answer"
	}
	return out
}

// short bounds a string a registry sent before it goes into a message of ours.
func short(s string) string {
	const max = 40
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
