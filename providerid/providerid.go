package providerid

import "strings"

// InstanceID is the instance a node's spec.providerID names: EC2's
// "aws:///us-west-2a/i-0123456789abcdef0" (also "aws://us-west-2a/i-..."), the last
// path element; and the kwok provider's "kwok://<node name>" (the local cluster),
// its name. ok is false for anything else (no providerID yet, another cloud).
func InstanceID(providerID string) (string, bool) {
	scheme, rest, found := strings.Cut(providerID, "://")
	if !found || rest == "" {
		return "", false
	}
	switch scheme {
	case "aws":
		rest = strings.TrimRight(rest, "/")
		id := rest[strings.LastIndexByte(rest, '/')+1:]
		if !strings.HasPrefix(id, "i-") || !ValidInstance(id) {
			return "", false
		}
		return id, true
	case "kwok":
		if strings.Contains(rest, "/") || !ValidInstance(rest) {
			return "", false
		}
		return rest, true
	}
	return "", false
}

// ValidInstance accepts EC2's instance ids (i- and hex digits) and other providers'
// node names InstanceID may return (the local cluster's kwok ids): 1 to 128 characters
// of letters, digits, '-', '.' and '_'.
func ValidInstance(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}
