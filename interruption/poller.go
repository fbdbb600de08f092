package interruption

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/sirupsen/logrus"
)

// Queue is the part of the SQS API the poller calls; *sqs.Client implements it.
type Queue interface {
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
}

// newSQSClient builds the SQS client for queue (a URL or a name) from the default chain
// (IRSA or EKS Pod Identity in a pod; AWS_REGION, else the region a queue URL names;
// AWS_ENDPOINT_URL_SQS for a local endpoint) and returns it with its region.
func newSQSClient(ctx context.Context, queue string) (*sqs.Client, string, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("interruption queue: AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = origin(queue, "").Region
	}
	return sqs.NewFromConfig(cfg), cfg.Region, nil
}

// Defaults of the poller.
const (
	// defaultWait is SQS's longest long poll: one request per 20 s while the queue is
	// empty.
	defaultWait = 20 * time.Second
	// defaultVisibility is how long a received message stays hidden from other
	// readers: handling takes milliseconds; a message left undeleted (the node view not
	// synced yet) comes back after it.
	defaultVisibility = 30 * time.Second
	maxBackoff        = time.Minute
)

// Poller reads the interruption queue and hands each message to Handle, deleting it
// unless Handle asks to see it again. Run it on the elected replica only.
type Poller struct {
	Queue Queue
	// Name is the queue's URL (https://sqs.<region>.amazonaws.com/<account>/<name>) or
	// name (resolved with GetQueueUrl, retried until it resolves).
	Name string
	// Region is the client's region: events of another one are dropped (the URL's
	// region, when it names one, wins).
	Region  string
	Handle  func(body []byte, want Origin) Outcome
	Metrics *Metrics
	Log     logrus.FieldLogger
	// Wait and Visibility default to defaultWait and defaultVisibility.
	Wait, Visibility time.Duration
	// sleep waits between failed reads (tests make it short).
	sleep func(ctx context.Context, d time.Duration)
}

// Run reads until ctx ends. A missing queue, a denied access or any other failure is
// logged (when it changes, and every 10 minutes while it lasts), counted, and retried
// with backoff (1 s doubling to a minute); nothing else waits on it.
func (p *Poller) Run(ctx context.Context) {
	if p.Wait <= 0 {
		p.Wait = defaultWait
	}
	if p.Visibility <= 0 {
		p.Visibility = defaultVisibility
	}
	sleep := p.sleep
	if sleep == nil {
		sleep = func(ctx context.Context, d time.Duration) {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
	}
	var (
		queueURL string
		want     Origin
		backoff  time.Duration
		lastErr  string
		lastLog  time.Time
	)
	fail := func(what string, err error) {
		reason := classify(err)
		p.Metrics.receiveErrors.WithLabelValues(reason).Inc()
		p.Metrics.reachable.Set(0)
		backoff = min(max(2*backoff, time.Second), maxBackoff)
		if msg := reason + what; msg != lastErr || time.Since(lastLog) > 10*time.Minute {
			lastErr, lastLog = msg, time.Now()
			p.Log.WithError(err).WithFields(logrus.Fields{"queue": p.Name, "reason": reason}).Error(failureHint(reason, what, p.Name))
		}
		sleep(ctx, backoff)
	}
	p.Log.WithField("queue", p.Name).Info("reading EC2 interruption signals")
	for ctx.Err() == nil {
		if queueURL == "" {
			u, err := p.resolve(ctx)
			if err != nil {
				if ctx.Err() == nil {
					fail("resolve", err)
				}
				continue
			}
			queueURL, want = u, origin(u, p.Region)
		}
		call, cancel := context.WithTimeout(ctx, p.Wait+15*time.Second)
		out, err := p.Queue.ReceiveMessage(call, &sqs.ReceiveMessageInput{
			QueueUrl:            aws.String(queueURL),
			MaxNumberOfMessages: 10,
			WaitTimeSeconds:     int32(p.Wait / time.Second),
			VisibilityTimeout:   int32(p.Visibility / time.Second),
		})
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				fail("receive", err)
			}
			continue
		}
		if backoff > 0 || lastErr != "" {
			p.Log.WithField("queue", p.Name).Info("interruption queue readable again")
		}
		backoff, lastErr = 0, ""
		p.Metrics.reachable.Set(1)
		for _, m := range out.Messages {
			p.handle(ctx, queueURL, want, m)
		}
	}
}

// handle judges one message and deletes it unless it is to come back.
func (p *Poller) handle(ctx context.Context, queueURL string, want Origin, m sqstypes.Message) {
	outcome := p.Handle([]byte(aws.ToString(m.Body)), want)
	if outcome.Retry {
		return
	}
	call, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := p.Queue.DeleteMessage(call, &sqs.DeleteMessageInput{QueueUrl: aws.String(queueURL), ReceiptHandle: m.ReceiptHandle})
	if err != nil {
		// It comes back after its visibility timeout and is recorded as a duplicate.
		p.Log.WithError(err).WithFields(logrus.Fields{"queue": p.Name, "message": aws.ToString(m.MessageId)}).Warn("interruption queue: cannot delete a handled message; it will be read again")
	}
}

// resolve returns the queue's URL: Name when it is one, else GetQueueUrl's answer.
func (p *Poller) resolve(ctx context.Context) (string, error) {
	if strings.HasPrefix(p.Name, "https://") || strings.HasPrefix(p.Name, "http://") {
		return p.Name, nil
	}
	call, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := p.Queue.GetQueueUrl(call, &sqs.GetQueueUrlInput{QueueName: aws.String(p.Name)})
	if err != nil {
		return "", err
	}
	return aws.ToString(out.QueueUrl), nil
}

var (
	accountPath = regexp.MustCompile(`^/(\d{12})/[^/]+$`)
	sqsHost     = regexp.MustCompile(`^sqs\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$`)
)

// origin is the account and region of a queue URL
// (https://sqs.<region>.amazonaws.com/<account>/<name>): the URL's region when its host
// names one, else region; the account when its path names one, else any.
func origin(queueURL, region string) Origin {
	o := Origin{Region: region}
	u, err := url.Parse(queueURL)
	if err != nil {
		return o
	}
	if m := accountPath.FindStringSubmatch(u.Path); m != nil {
		o.Account = m[1]
	}
	if m := sqsHost.FindStringSubmatch(u.Hostname()); m != nil {
		o.Region = m[1]
	}
	return o
}

// classify names a failed call's reason for the metric.
func classify(err error) string {
	var missing *sqstypes.QueueDoesNotExist
	if errors.As(err, &missing) {
		return reasonQueueMissing
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue":
			return reasonQueueMissing
		case "AccessDenied", "AccessDeniedException", "KMS.AccessDeniedException", "KmsAccessDenied":
			return reasonAccessDenied
		}
	}
	return reasonOther
}

// failureHint is the log message of a failed read: what to check.
func failureHint(reason, what, queue string) string {
	switch reason {
	case reasonQueueMissing:
		return fmt.Sprintf("interruption queue %s does not exist (%s): check INTERRUPTION_QUEUE and the region (AWS_REGION); retrying", queue, what)
	case reasonAccessDenied:
		return fmt.Sprintf("interruption queue %s: access denied (%s): the webhook's role needs sqs:ReceiveMessage, sqs:DeleteMessage and sqs:GetQueueUrl on it (and kms:Decrypt with a KMS key); retrying", queue, what)
	}
	return fmt.Sprintf("interruption queue %s: %s failed; retrying", queue, what)
}
