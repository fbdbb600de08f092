package clusterview

// Compact forms of a cached pod's own values: each converts back to the exact string
// or time it came from, and reports false for a value it cannot hold, which the cached
// pod then keeps as it was (oddPod).

import (
	"math"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// packedUUID is a UUID in its canonical text form (36 characters, lower-case hex),
// as 16 bytes; the zero value is none.
type packedUUID [16]byte

const hexDigits = "0123456789abcdef"

// packUUID packs s if it is a UUID in canonical form, other than the nil UUID (which
// packs to none).
func packUUID(s string) (packedUUID, bool) {
	var u packedUUID
	if len(s) != 36 {
		return u, false
	}
	j := 0
	for i := 0; i < 36; i++ {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return u, false
			}
			continue
		}
		hi, ok1 := hexValue(s[i])
		lo, ok2 := hexValue(s[i+1])
		if !ok1 || !ok2 {
			return u, false
		}
		u[j] = hi<<4 | lo
		j++
		i++
	}
	return u, u != packedUUID{}
}

// hexValue is the value of a lower-case hex digit.
func hexValue(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// String is the canonical text form of u, "" for none.
func (u packedUUID) String() string {
	if u == (packedUUID{}) {
		return ""
	}
	var b [36]byte
	j := 0
	for i, x := range u {
		switch i {
		case 4, 6, 8, 10:
			b[j] = '-'
			j++
		}
		b[j], b[j+1] = hexDigits[x>>4], hexDigits[x&0xf]
		j += 2
	}
	return string(b[:])
}

// packDecimal is s as a positive number without leading zeros (so that formatting it
// gives s back) that fits max; "" packs to 0.
func packDecimal(s string, max uint64) (uint64, bool) {
	if s == "" {
		return 0, true
	}
	if s[0] == '0' {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > max {
		return 0, false
	}
	return n, true
}

// formatDecimal is packDecimal's s again: "" for 0.
func formatDecimal(n uint64) string {
	if n == 0 {
		return ""
	}
	return strconv.FormatUint(n, 10)
}

// packTime is t in Unix seconds (the API's precision) if they fit 32 bits unsigned;
// the zero time packs to 0.
func packTime(t metav1.Time) (uint32, bool) {
	if t.IsZero() {
		return 0, true
	}
	s := t.Unix()
	if s <= 0 || s > math.MaxUint32 {
		return 0, false
	}
	return uint32(s), true
}
