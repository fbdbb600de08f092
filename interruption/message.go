package interruption

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/providerid"
)

// Kind is what an EC2 event says about an instance.
type Kind string

// The kinds of signal, as the metrics' "kind" label names them.
const (
	// KindInterruption is a spot interruption warning: the instance is reclaimed in
	// two minutes.
	KindInterruption Kind = "interruption-warning"
	// KindRebalance is a rebalance recommendation: the instance is at elevated risk of
	// interruption.
	KindRebalance Kind = "rebalance-recommendation"
	// KindStateChange is a state-change notification; only stopping, stopped,
	// shutting-down and terminated count as a signal (Signal.Counts).
	KindStateChange Kind = "state-change"
	// KindCapacityBlockEnd is a Capacity Block's expiration warning, 40 minutes before
	// its end: EC2 terminates every instance of the reservation from 30 minutes before
	// the end. It names the reservation, not an instance.
	KindCapacityBlockEnd Kind = "capacity-block-end"
)

// Kinds lists every kind, in the order the docs and metrics name them.
var Kinds = []Kind{KindInterruption, KindRebalance, KindStateChange, KindCapacityBlockEnd}

// detailTypes maps EventBridge's detail-type to the kind. AWS's pages name the
// Capacity Block's warning both ways (EventBridge's list of EC2 events, and the EC2
// guide's example event): both are read.
var detailTypes = map[string]Kind{
	"EC2 Spot Instance Interruption Warning":        KindInterruption,
	"EC2 Instance Rebalance Recommendation":         KindRebalance,
	"EC2 Instance State-change Notification":        KindStateChange,
	"Capacity Block Expiration Warning":             KindCapacityBlockEnd,
	"Capacity Block Reservation Expiration Warning": KindCapacityBlockEnd,
}

// reservationID is an EC2 capacity reservation id (cr- and 8 or 17 hex digits).
var reservationID = regexp.MustCompile(`^cr-(?:[0-9a-f]{8}|[0-9a-f]{17})$`)

// lossStates are the instance states a state-change notification counts for.
var lossStates = map[string]bool{"stopping": true, "stopped": true, "shutting-down": true, "terminated": true}

// maxMessageBytes is the largest message body decoded: SQS's own limit (256 KiB).
const maxMessageBytes = 256 << 10

// Signal is one decoded EC2 event.
type Signal struct {
	// ID is EventBridge's event id: a message delivered twice has the same one.
	ID   string
	Kind Kind
	// Instance is the instance the event is about ("" for a Capacity Block's warning).
	Instance string
	// Reservation and End are a Capacity Block's id and end ("" and zero otherwise).
	Reservation string
	End         time.Time
	// State is the new instance state of a state-change notification ("" otherwise).
	State string
	// Time is when EC2 emitted the event.
	Time            time.Time
	Account, Region string
}

// Counts reports whether the signal speaks of capacity going away: every warning and
// recommendation, and a state change into stopping, stopped, shutting-down or
// terminated (not pending or running).
func (s Signal) Counts() bool {
	return s.Kind != KindStateChange || lossStates[s.State]
}

// Key identifies the event for duplicate detection: its id, or its content when the
// event carries none.
func (s Signal) Key() string {
	if s.ID != "" {
		return s.ID
	}
	return string(s.Kind) + "/" + s.Instance + s.Reservation + "/" + s.State + "/" + s.Time.UTC().Format(time.RFC3339Nano)
}

// decodeError is why a message is not a signal. Reason is the metrics' "result" label:
// resultMalformed (not an EventBridge EC2 event of the expected shape) or
// resultUnsupported (an EC2 event of another detail-type).
type decodeError struct {
	Reason string
	Detail string
}

func (e *decodeError) Error() string { return e.Reason + ": " + e.Detail }

func malformed(format string, args ...any) error {
	return &decodeError{Reason: resultMalformed, Detail: fmt.Sprintf(format, args...)}
}

// envelope is the part of an EventBridge event that is read.
type envelope struct {
	ID         string          `json:"id"`
	DetailType string          `json:"detail-type"`
	Source     string          `json:"source"`
	Account    string          `json:"account"`
	Time       string          `json:"time"`
	Region     string          `json:"region"`
	Detail     json.RawMessage `json:"detail"`
}

type detail struct {
	InstanceID    string `json:"instance-id"`
	State         string `json:"state"`
	ReservationID string `json:"capacity-reservation-id"`
	EndDate       string `json:"end-date"`
}

// decode reads one SQS message body as the EventBridge event of an EC2 instance. It
// never panics; anything it cannot use is a *DecodeError.
func decode(body []byte) (Signal, error) {
	if len(body) > maxMessageBytes {
		return Signal{}, malformed("message of %d bytes, more than SQS's %d", len(body), maxMessageBytes)
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return Signal{}, malformed("not a JSON object")
	}
	var env envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return Signal{}, malformed("not an EventBridge event: %v", err)
	}
	if env.Source != "aws.ec2" {
		return Signal{}, malformed("source %q, want aws.ec2", clip(env.Source))
	}
	kind, ok := detailTypes[env.DetailType]
	if !ok {
		return Signal{}, &decodeError{Reason: resultUnsupported, Detail: fmt.Sprintf("detail-type %q is none of the EC2 events read", clip(env.DetailType))}
	}
	var d detail
	if len(env.Detail) == 0 || json.Unmarshal(env.Detail, &d) != nil {
		return Signal{}, malformed("%s without a detail object", kind)
	}
	if kind != KindCapacityBlockEnd && !providerid.ValidInstance(d.InstanceID) {
		return Signal{}, malformed("%s: instance-id %q is not an instance id", kind, clip(d.InstanceID))
	}
	at, err := time.Parse(time.RFC3339, env.Time)
	if err != nil {
		return Signal{}, malformed("%s: time %q is not RFC 3339", kind, clip(env.Time))
	}
	if env.Account == "" || env.Region == "" {
		return Signal{}, malformed("%s: account or region missing", kind)
	}
	s := Signal{ID: env.ID, Kind: kind, Instance: d.InstanceID, Time: at, Account: env.Account, Region: env.Region}
	if kind == KindCapacityBlockEnd {
		return capacityBlock(s, d)
	}
	if kind == KindStateChange {
		if d.State == "" {
			return Signal{}, malformed("%s without a state", kind)
		}
		s.State = strings.ToLower(d.State)
	}
	return s, nil
}

// capacityBlock completes a Capacity Block's warning: the reservation and its end (RFC
// 3339; AWS writes milliseconds), which is after the warning.
func capacityBlock(s Signal, d detail) (Signal, error) {
	if !reservationID.MatchString(d.ReservationID) {
		return Signal{}, malformed("%s: capacity-reservation-id %q is not a reservation id", s.Kind, clip(d.ReservationID))
	}
	end, err := time.Parse(time.RFC3339, d.EndDate)
	if err != nil || !end.After(s.Time) {
		return Signal{}, malformed("%s: end-date %q is no RFC 3339 time after the event's", s.Kind, clip(d.EndDate))
	}
	s.Instance, s.Reservation, s.End = "", d.ReservationID, end
	return s, nil
}

// clip shortens a value quoted in a message: bad input is named, never echoed whole.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
