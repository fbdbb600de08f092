package interruption

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/providerid"
)

// event is an EventBridge EC2 event as a queue receives it.
func event(id, detailType, account, region string, at time.Time, detail string) string {
	return fmt.Sprintf(`{"version":"0","id":%q,"detail-type":%q,"source":"aws.ec2","account":%q,"time":%q,"region":%q,"resources":["arn:aws:ec2:%s:%s:instance/i-1"],"detail":%s}`,
		id, detailType, account, at.UTC().Format(time.RFC3339), region, region, account, detail)
}

func TestDecode(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name, body string
		want       Signal
		reason     string // a DecodeError's reason; "" for a signal
	}{
		{name: "interruption warning",
			body: event("e1", "EC2 Spot Instance Interruption Warning", "123456789012", "eu-west-1", at, `{"instance-id":"i-0abc","instance-action":"terminate"}`),
			want: Signal{ID: "e1", Kind: KindInterruption, Instance: "i-0abc", Time: at, Account: "123456789012", Region: "eu-west-1"}},
		{name: "rebalance recommendation",
			body: event("e2", "EC2 Instance Rebalance Recommendation", "123456789012", "eu-west-1", at, `{"instance-id":"i-0abc"}`),
			want: Signal{ID: "e2", Kind: KindRebalance, Instance: "i-0abc", Time: at, Account: "123456789012", Region: "eu-west-1"}},
		{name: "state change",
			body: event("e3", "EC2 Instance State-change Notification", "123456789012", "eu-west-1", at, `{"instance-id":"i-0abc","state":"Shutting-Down"}`),
			want: Signal{ID: "e3", Kind: KindStateChange, Instance: "i-0abc", State: "shutting-down", Time: at, Account: "123456789012", Region: "eu-west-1"}},
		{name: "Capacity Block warning, as EventBridge lists it",
			body: event("e4", "Capacity Block Expiration Warning", "123456789012", "eu-west-1", at, `{"capacity-reservation-id":"cr-0123456789abcdef0","end-date":"2026-03-01T12:40:00.000Z"}`),
			want: Signal{ID: "e4", Kind: KindCapacityBlockEnd, Reservation: "cr-0123456789abcdef0", End: at.Add(40 * time.Minute), Time: at, Account: "123456789012", Region: "eu-west-1"}},
		{name: "Capacity Block warning, as the EC2 guide's example names it",
			body: event("e5", "Capacity Block Reservation Expiration Warning", "123456789012", "eu-west-1", at, `{"capacity-reservation-id":"cr-12345678","end-date":"2026-03-01T12:40:00Z","instance-id":"i-0abc"}`),
			want: Signal{ID: "e5", Kind: KindCapacityBlockEnd, Reservation: "cr-12345678", End: at.Add(40 * time.Minute), Time: at, Account: "123456789012", Region: "eu-west-1"}},
		{name: "Capacity Block delivered", body: event("e", "Capacity Block Reservation Delivered", "1", "r", at, `{"capacity-reservation-id":"cr-12345678","end-date":"2026-03-01T12:40:00Z"}`), reason: resultUnsupported},
		{name: "Capacity Block without a reservation", body: event("e", "Capacity Block Expiration Warning", "1", "r", at, `{"end-date":"2026-03-01T12:40:00Z"}`), reason: resultMalformed},
		{name: "Capacity Block with a bad reservation", body: event("e", "Capacity Block Expiration Warning", "1", "r", at, `{"capacity-reservation-id":"cr-../x","end-date":"2026-03-01T12:40:00Z"}`), reason: resultMalformed},
		{name: "Capacity Block without an end", body: event("e", "Capacity Block Expiration Warning", "1", "r", at, `{"capacity-reservation-id":"cr-12345678"}`), reason: resultMalformed},
		{name: "Capacity Block ending before its warning", body: event("e", "Capacity Block Expiration Warning", "1", "r", at, `{"capacity-reservation-id":"cr-12345678","end-date":"2026-03-01T11:00:00Z"}`), reason: resultMalformed},
		{name: "garbage", body: "hello", reason: resultMalformed},
		{name: "empty", body: "", reason: resultMalformed},
		{name: "JSON array", body: "[1,2]", reason: resultMalformed},
		{name: "truncated", body: `{"source":"aws.ec2","detail-type":"EC2`, reason: resultMalformed},
		{name: "another source",
			body:   strings.Replace(event("e", "EC2 Instance Rebalance Recommendation", "1", "r", at, `{"instance-id":"i-1"}`), "aws.ec2", "aws.s3", 1),
			reason: resultMalformed},
		{name: "another EC2 event",
			body:   event("e", "EC2 Fleet Spot Instance Request Change", "1", "r", at, `{"instance-id":"i-1"}`),
			reason: resultUnsupported},
		{name: "no detail", body: strings.Replace(event("e", "EC2 Instance Rebalance Recommendation", "1", "r", at, `null`), `,"detail":null`, "", 1), reason: resultMalformed},
		{name: "detail not an object", body: event("e", "EC2 Instance Rebalance Recommendation", "1", "r", at, `"i-1"`), reason: resultMalformed},
		{name: "no instance", body: event("e", "EC2 Instance Rebalance Recommendation", "1", "r", at, `{}`), reason: resultMalformed},
		{name: "instance with a slash", body: event("e", "EC2 Instance Rebalance Recommendation", "1", "r", at, `{"instance-id":"../i-1"}`), reason: resultMalformed},
		{name: "bad time", body: strings.Replace(event("e", "EC2 Instance Rebalance Recommendation", "1", "r", at, `{"instance-id":"i-1"}`), "2026-03-01T12:00:00Z", "yesterday", 1), reason: resultMalformed},
		{name: "no account", body: event("e", "EC2 Instance Rebalance Recommendation", "", "r", at, `{"instance-id":"i-1"}`), reason: resultMalformed},
		{name: "state change without a state", body: event("e", "EC2 Instance State-change Notification", "1", "r", at, `{"instance-id":"i-1"}`), reason: resultMalformed},
		{name: "too big", body: `{"x":"` + strings.Repeat("a", maxMessageBytes) + `"}`, reason: resultMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decode([]byte(tc.body))
			if tc.reason == "" {
				if err != nil || got != tc.want {
					t.Fatalf("Decode: %+v, %v; want %+v", got, err, tc.want)
				}
				return
			}
			var de *decodeError
			if !errors.As(err, &de) || de.Reason != tc.reason {
				t.Fatalf("Decode: %+v, %v; want a %s DecodeError", got, err, tc.reason)
			}
			if len(err.Error()) > 300 {
				t.Errorf("error message of %d bytes quotes the input whole", len(err.Error()))
			}
		})
	}
}

func TestSignalCounts(t *testing.T) {
	for state, want := range map[string]bool{"pending": false, "running": false, "stopping": true, "stopped": true, "shutting-down": true, "terminated": true} {
		if got := (Signal{Kind: KindStateChange, State: state}).Counts(); got != want {
			t.Errorf("state %s counts %v, want %v", state, got, want)
		}
	}
	if !(Signal{Kind: KindRebalance}).Counts() || !(Signal{Kind: KindInterruption}).Counts() {
		t.Error("warnings and recommendations must count")
	}
}

// decode never panics, and what it accepts is a signal whose fields hold what the rest
// relies on.
func FuzzDecode(f *testing.F) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, seed := range []string{
		event("e1", "EC2 Spot Instance Interruption Warning", "123456789012", "eu-west-1", at, `{"instance-id":"i-0abc","instance-action":"terminate"}`),
		event("e2", "EC2 Instance Rebalance Recommendation", "123456789012", "eu-west-1", at, `{"instance-id":"i-0abc"}`),
		event("e3", "EC2 Instance State-change Notification", "123456789012", "eu-west-1", at, `{"instance-id":"i-0abc","state":"terminated"}`),
		event("e4", "Capacity Block Expiration Warning", "123456789012", "eu-west-1", at, `{"capacity-reservation-id":"cr-0123456789abcdef0","end-date":"2026-03-01T12:40:00.000Z"}`),
		"", "{}", "null", `{"source":"aws.ec2","detail":{"instance-id":1}}`, "\xff\xfe",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := decode(body)
		if err != nil {
			var de *decodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v is no *DecodeError", err)
			}
			return
		}
		if s.Time.IsZero() || s.Account == "" || s.Region == "" || s.Kind == "" {
			t.Fatalf("accepted an incomplete signal %+v", s)
		}
		if s.Kind == KindCapacityBlockEnd {
			if !reservationID.MatchString(s.Reservation) || !s.End.After(s.Time) || s.Instance != "" {
				t.Fatalf("accepted a Capacity Block warning without its reservation and end: %+v", s)
			}
			return
		}
		if !providerid.ValidInstance(s.Instance) || s.Reservation != "" || !s.End.IsZero() {
			t.Fatalf("accepted an incomplete signal %+v", s)
		}
		if s.Kind == KindStateChange && s.State == "" {
			t.Fatalf("state change without a state: %+v", s)
		}
	})
}
