package ledger

// The seat record's encoding: one Lease per revision, its reservations in one
// annotation of "seat:id-hash:expiry" items (hash: FNV-1a of the admission UID, expiry:
// Unix seconds, both base 36), about 25 bytes each.

import (
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/clusterview"
	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/strategy"
)

func recordName(revision types.UID) string { return "seats-" + string(revision) }

func recordRevision(record *coordinationv1.Lease) (clusterview.Revision, bool) {
	uid := record.Labels[strategy.LabelRevision]
	return clusterview.Revision{Namespace: record.Labels[strategy.LabelRevisionNamespace], UID: types.UID(uid)}, uid != ""
}

// resourceVersion reads a record's resourceVersion as etcd's number (unreadable: 0).
func resourceVersion(record *coordinationv1.Lease) uint64 {
	rv, _ := strconv.ParseUint(record.ResourceVersion, 10, 64)
	return rv
}

// idHash is the 64-bit FNV-1a hash of a reservation id, never 0.
func idHash(id types.UID) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	if v := h.Sum64(); v != 0 {
		return v
	}
	return 1
}

// encodeReservations lists the reservations whose pod is not seen yet, then others (for
// a new owner whose informer lags) up to maxReservations.
func encodeReservations(items map[uint64]*entry) string {
	n := min(len(items), maxReservations)
	buf := make([]byte, 0, n*26)
	written := 0
	for _, open := range []bool{true, false} {
		for h, e := range items {
			if e.counted != open || written >= maxReservations {
				continue
			}
			written++
			buf = appendReservation(buf, h, e)
		}
	}
	return string(buf)
}

func appendReservation(buf []byte, h uint64, e *entry) []byte {
	if len(buf) > 0 {
		buf = append(buf, ',')
	}
	buf = strconv.AppendInt(buf, int64(e.seat), 10)
	buf = append(buf, ':')
	buf = strconv.AppendUint(buf, h, 36)
	buf = append(buf, ':')
	// Whole seconds, rounded up: never end before the TTL.
	return strconv.AppendInt(buf, e.expires.Add(time.Second-1).Unix(), 36)
}

// decodeReservations parses a record's reservations, skipping malformed items.
func decodeReservations(s string) map[uint64]*entry {
	out := map[uint64]*entry{}
	for item := range strings.SplitSeq(s, ",") {
		f := strings.Split(item, ":")
		if len(f) != 3 {
			continue
		}
		seat, err1 := strconv.Atoi(f[0])
		h, err2 := strconv.ParseUint(f[1], 36, 64)
		exp, err3 := strconv.ParseInt(f[2], 36, 64)
		if err1 != nil || err2 != nil || err3 != nil || seat < 1 || h == 0 {
			continue
		}
		out[h] = &entry{seat: seat, expires: time.Unix(exp, 0)}
	}
	return out
}
