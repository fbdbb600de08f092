package interruption

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/custom-kube-scheduler/custom-kube-scheduler-webhook/internal/awsfake"
)

// The local endpoint itself, through the real SDK client: long polling waits for a
// message, a received message not deleted comes back after its visibility timeout and
// not before, a deleted one never.
func TestLocalSQSEndpoint(t *testing.T) {
	fake := awsfake.StartSQSForTest(t)
	url := fake.CreateQueue("signals")
	ctx := context.Background()
	client, region, err := newSQSClient(ctx, "")
	if err != nil || region != "eu-west-1" {
		t.Fatalf("client: %v, region %q", err, region)
	}
	got, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("signals")})
	if err != nil || aws.ToString(got.QueueUrl) != url {
		t.Fatalf("GetQueueUrl: %v, %v; want %s", got, err, url)
	}
	// Long polling: the receive waits for the message sent while it waits.
	received := make(chan *sqs.ReceiveMessageOutput, 1)
	go func() {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 10, VisibilityTimeout: 1})
		if err != nil {
			t.Errorf("long poll: %v", err)
		}
		received <- out
	}()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return fake.Calls("ReceiveMessage") == 1, nil
	}); err != nil {
		t.Fatal("the long poll never arrived")
	}
	if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("hello")}); err != nil {
		t.Fatalf("SendMessage (the SDK checks the body's MD5): %v", err)
	}
	out := <-received
	if out == nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != "hello" {
		t.Fatalf("long poll answered %+v", out)
	}
	first := out.Messages[0]
	// Hidden for its visibility timeout: a receive without waiting finds nothing.
	if out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url)}); err != nil || len(out.Messages) != 0 {
		t.Fatalf("receive while in flight: %+v, %v", out, err)
	}
	// Not deleted: it comes back once the timeout passed, with a new receipt handle.
	again, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 10, VisibilityTimeout: 30})
	if err != nil || len(again.Messages) != 1 || aws.ToString(again.Messages[0].MessageId) != aws.ToString(first.MessageId) {
		t.Fatalf("after the visibility timeout: %+v, %v", again, err)
	}
	if aws.ToString(again.Messages[0].ReceiptHandle) == aws.ToString(first.ReceiptHandle) {
		t.Error("the receipt handle did not change")
	}
	if _, err := client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: again.Messages[0].ReceiptHandle}); err != nil {
		t.Fatalf("DeleteMessage: %v", err)
	}
	if n := fake.Messages("signals"); n != 0 {
		t.Fatalf("%d messages left after the delete", n)
	}
	// Errors as the real service answers them.
	_, err = client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(fake.URL + "/000000000000/missing")})
	if classify(err) != reasonQueueMissing {
		t.Errorf("missing queue: %v classified %s", err, classify(err))
	}
	fake.Deny("signals", true)
	_, err = client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url)})
	if classify(err) != reasonAccessDenied {
		t.Errorf("denied: %v classified %s", err, classify(err))
	}
}

// pollerRig runs a Poller with a tracker over pools() against the local endpoint.
type pollerRig struct {
	fake    *awsfake.SQS
	url     string
	tracker *Tracker
	metrics *Metrics
	cancel  context.CancelFunc
	done    chan struct{}
	now     time.Time
	mu      sync.Mutex
	retry   bool // Handle answers Retry while set
}

func startPoller(t *testing.T, queue string, create bool) *pollerRig {
	t.Helper()
	r := &pollerRig{fake: awsfake.StartSQSForTest(t), now: time.Now()}
	if create {
		r.url = r.fake.CreateQueue("signals")
	}
	now := time.Now()
	r.tracker, r.metrics, _ = newTestTracker(t, pools(), &now)
	client, region, err := newSQSClient(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if queue == "" {
		queue = r.fake.URL + "/000000000000/signals"
	}
	p := &Poller{Queue: client, Name: queue, Region: region, Metrics: r.metrics, Log: quietLog(),
		Wait: time.Second, Visibility: time.Second,
		Handle: func(body []byte, want Origin) Outcome {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.retry {
				return Outcome{Retry: true}
			}
			return r.tracker.Handle(body, want)
		},
		sleep: func(ctx context.Context, _ time.Duration) {
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	go func() { defer close(r.done); p.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *pollerRig) stop() {
	r.cancel()
	<-r.done
}

func (r *pollerRig) send(t *testing.T, body string) {
	t.Helper()
	if _, err := r.fake.Send("signals", body); err != nil {
		t.Fatal(err)
	}
}

func (r *pollerRig) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func (r *pollerRig) count(result string) float64 {
	return testutil.ToFloat64(r.metrics.messages.WithLabelValues(result))
}

// Duplicates, reordering and garbage through the real client: each message is handled
// and deleted once, the signals are recorded, the rest counted.
func TestPollerHandlesEachMessageOnce(t *testing.T) {
	r := startPoller(t, "signals", true) // by name: resolved with GetQueueUrl
	now := time.Now()
	rebalance := func(id, node string, at time.Time) string {
		return event(id, "EC2 Instance Rebalance Recommendation", "000000000000", "eu-west-1", at, fmt.Sprintf(`{"instance-id":"i-%s"}`, node))
	}
	r.send(t, rebalance("e1", "a0", now))
	r.send(t, rebalance("e1", "a0", now)) // SQS delivered it twice
	r.send(t, rebalance("e2", "a1", now.Add(-time.Second)))
	r.send(t, rebalance("e3", "a1", now.Add(-3*time.Minute))) // older, after the newer
	r.send(t, "}{ garbage")
	r.send(t, rebalance("e4", "a2", now.Add(-time.Hour))) // stale
	r.send(t, event("e5", "EC2 Instance Rebalance Recommendation", "111111111111", "eu-west-1", now, `{"instance-id":"i-a3"}`))
	r.waitFor(t, "every message handled and deleted", func() bool {
		return r.fake.Messages("signals") == 0 && r.count(resultSignal)+r.count(resultDuplicate)+r.count(resultMalformed)+r.count(resultStale)+r.count(resultOtherAccount) == 7
	})
	for result, want := range map[string]float64{resultSignal: 3, resultDuplicate: 1, resultMalformed: 1, resultStale: 1, resultOtherAccount: 1} {
		if got := r.count(result); got != want {
			t.Errorf("%s: %v, want %v", result, got, want)
		}
	}
	v := r.tracker.Assess(term(t, "pool=spot-a"), time.Now())
	if !v.AtRisk || len(v.Signalled) != 2 {
		t.Errorf("spot-a: at risk %v with %d nodes signalled, want 2 (a0, a1)", v.AtRisk, len(v.Signalled))
	}
	if got := r.fake.Calls("DeleteMessage"); got != 7 {
		t.Errorf("%d deletes, want 7 (one per message)", got)
	}
	if got := testutil.ToFloat64(r.metrics.reachable); got != 1 {
		t.Errorf("queue_reachable %v, want 1", got)
	}
}

// A message the tracker cannot judge yet stays in the queue and comes back after its
// visibility timeout.
func TestPollerLeavesRetriedMessages(t *testing.T) {
	r := startPoller(t, "", true)
	r.mu.Lock()
	r.retry = true
	r.mu.Unlock()
	r.send(t, event("e1", "EC2 Spot Instance Interruption Warning", "000000000000", "eu-west-1", time.Now(), `{"instance-id":"i-a0"}`))
	r.waitFor(t, "the message received", func() bool { return r.fake.Calls("ReceiveMessage") >= 2 })
	if r.fake.Messages("signals") != 1 || r.fake.Calls("DeleteMessage") != 0 {
		t.Fatalf("a retried message was deleted")
	}
	r.mu.Lock()
	r.retry = false
	r.mu.Unlock()
	r.waitFor(t, "the message back and handled", func() bool { return r.fake.Messages("signals") == 0 })
	if got := r.count(resultSignal); got != 1 {
		t.Errorf("signals %v, want 1", got)
	}
}

// A missing queue and a denied access: logged and counted, retried, and read once they
// are fixed.
func TestPollerQueueMissingOrDenied(t *testing.T) {
	r := startPoller(t, "", false)
	errs := func(reason string) float64 {
		return testutil.ToFloat64(r.metrics.receiveErrors.WithLabelValues(reason))
	}
	r.waitFor(t, "queue-missing counted", func() bool { return errs(reasonQueueMissing) >= 2 })
	if got := testutil.ToFloat64(r.metrics.reachable); got != 0 {
		t.Errorf("queue_reachable %v while missing", got)
	}
	r.fake.CreateQueue("signals")
	r.fake.Deny("signals", true)
	r.waitFor(t, "access-denied counted", func() bool { return errs(reasonAccessDenied) >= 2 })
	r.fake.Deny("signals", false)
	r.send(t, event("e1", "EC2 Instance Rebalance Recommendation", "000000000000", "eu-west-1", time.Now(), `{"instance-id":"i-b0"}`))
	r.waitFor(t, "the signal read once the queue is readable", func() bool { return r.count(resultSignal) == 1 })
	if got := errs(reasonOther); got != 0 {
		t.Errorf("%v errors classified other", got)
	}
}

func TestOrigin(t *testing.T) {
	for u, want := range map[string]Origin{
		"https://sqs.eu-west-1.amazonaws.com/123456789012/signals": {Account: "123456789012", Region: "eu-west-1"},
		"https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q":   {Account: "123456789012", Region: "cn-north-1"},
		"http://127.0.0.1:4566/000000000000/signals":               {Account: "000000000000", Region: "us-west-2"},
		"http://localhost/queue":                                   {Region: "us-west-2"},
	} {
		if got := origin(u, "us-west-2"); got != want {
			t.Errorf("origin(%s) = %+v, want %+v", u, got, want)
		}
	}
}
