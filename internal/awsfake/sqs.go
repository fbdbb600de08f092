package awsfake

import (
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// SQS is a local SQS endpoint: the AWS JSON 1.0 protocol aws-sdk-go-v2's SQS client
// speaks (POST /, X-Amz-Target AmazonSQS.<operation>, X-Amzn-Query-Mode: true), with
// GetQueueUrl, SendMessage, ReceiveMessage (long polling with WaitTimeSeconds,
// visibility timeouts: a received message not deleted comes back once its timeout
// passes), DeleteMessage and CreateQueue. A missing queue answers QueueDoesNotExist and a
// queue set to deny answers AccessDenied, with the x-amzn-query-error header the real
// service sends. Safe for concurrent use.
type SQS struct {
	// URL is the endpoint's base URL (set by StartSQSForTest, or by whoever serves it):
	// a queue's URL is URL/<account>/<name>.
	URL     string
	Account string

	mu     sync.Mutex
	queues map[string]*fakeQueue
	deny   map[string]bool
	calls  map[string]int
	wake   chan struct{} // closed and replaced when a message is sent or becomes visible
}

type fakeQueue struct {
	msgs []*fakeMessage
}

type fakeMessage struct {
	id, body, receipt string
	visibleAt         time.Time
	received          int
}

// NewSQS returns an endpoint whose queues belong to account.
func NewSQS(account string) *SQS {
	return &SQS{Account: account, queues: map[string]*fakeQueue{}, deny: map[string]bool{}, calls: map[string]int{}, wake: make(chan struct{})}
}

// CreateQueue makes queue name (nothing if it exists) and returns its URL.
func (s *SQS) CreateQueue(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queues[name] == nil {
		s.queues[name] = &fakeQueue{}
	}
	return s.queueURL(name)
}

// DeleteQueue removes queue name and its messages.
func (s *SQS) DeleteQueue(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.queues, name)
}

// Deny makes every call on queue name answer AccessDenied (true) or not.
func (s *SQS) Deny(name string, deny bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deny[name] = deny
}

// Send puts body on queue name and returns the message id.
func (s *SQS) Send(name, body string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[name]
	if q == nil {
		return "", fmt.Errorf("no queue %s", name)
	}
	return s.sendLocked(q, body, 0), nil
}

// Messages counts the messages of queue name, in flight (received, not deleted) or not.
func (s *SQS) Messages(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.queues[name]; q != nil {
		return len(q.msgs)
	}
	return 0
}

// Calls returns how often an operation ("ReceiveMessage", "DeleteMessage", ...) was
// called.
func (s *SQS) Calls(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

func (s *SQS) queueURL(name string) string {
	return strings.TrimRight(s.URL, "/") + "/" + s.Account + "/" + name
}

// queueName is the name in a queue URL of this endpoint's account ("" when it is none).
func (s *SQS) queueName(queueURL string) string {
	i := strings.Index(queueURL, "/"+s.Account+"/")
	if i < 0 {
		return ""
	}
	return queueURL[i+len(s.Account)+2:]
}

func (s *SQS) sendLocked(q *fakeQueue, body string, delay time.Duration) string {
	m := &fakeMessage{id: randomID(), body: body, visibleAt: time.Now().Add(delay)}
	q.msgs = append(q.msgs, m)
	s.wakeLocked()
	return m.id
}

func (s *SQS) wakeLocked() {
	close(s.wake)
	s.wake = make(chan struct{})
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// sqsError is an error answer of the JSON 1.0 protocol in the query-compatible mode
// SQS runs in.
type sqsError struct {
	status     int
	typ, query string
	message    string
}

var (
	errNoQueue = sqsError{http.StatusBadRequest, "com.amazonaws.sqs#QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue;Sender", "The specified queue does not exist."}
	errDenied  = sqsError{http.StatusBadRequest, "com.amazon.coral.service#AccessDeniedException", "AccessDenied;Sender", "Access to the resource is denied."}
)

// ServeHTTP implements http.Handler.
func (s *SQS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(e sqsError) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		if e.query != "" {
			w.Header().Set("x-amzn-query-error", e.query)
		}
		w.WriteHeader(e.status)
		_ = json.NewEncoder(w).Encode(map[string]string{"__type": e.typ, "message": e.message})
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	target := r.Header.Get("X-Amz-Target")
	switch {
	case err != nil:
		fail(sqsError{status: http.StatusBadRequest, typ: "com.amazonaws.sqs#InvalidParameterValue", message: err.Error()})
		return
	case r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-amz-json-1.0"):
		fail(sqsError{status: http.StatusBadRequest, typ: "com.amazonaws.sqs#InvalidAddress", message: "want POST with application/x-amz-json-1.0"})
		return
	case !signedFor(r, "sqs"):
		fail(sqsError{status: http.StatusForbidden, typ: "com.amazon.coral.service#MissingAuthenticationTokenException", query: "MissingAuthenticationToken;Sender", message: "request not signed for service sqs"})
		return
	case !strings.HasPrefix(target, "AmazonSQS."):
		fail(sqsError{status: http.StatusBadRequest, typ: "com.amazon.coral.service#UnknownOperationException", message: "unknown operation " + target})
		return
	}
	op := strings.TrimPrefix(target, "AmazonSQS.")
	var in struct {
		QueueURL            string `json:"QueueUrl"`
		QueueName           string
		MessageBody         string
		ReceiptHandle       string
		MaxNumberOfMessages int
		WaitTimeSeconds     *int
		VisibilityTimeout   *int
		DelaySeconds        int
	}
	if err := json.Unmarshal(body, &in); err != nil {
		fail(sqsError{status: http.StatusBadRequest, typ: "com.amazonaws.sqs#InvalidParameterValue", message: err.Error()})
		return
	}
	s.mu.Lock()
	s.calls[op]++
	name := in.QueueName
	if name == "" {
		name = s.queueName(in.QueueURL)
	}
	q, denied := s.queues[name], s.deny[name]
	s.mu.Unlock()
	switch {
	case denied:
		fail(errDenied)
		return
	case q == nil && op != "CreateQueue":
		fail(errNoQueue)
		return
	}
	var out any
	switch op {
	case "CreateQueue":
		out = map[string]string{"QueueUrl": s.CreateQueue(in.QueueName)}
	case "GetQueueUrl":
		out = map[string]string{"QueueUrl": s.queueURL(name)}
	case "SendMessage":
		s.mu.Lock()
		id := s.sendLocked(q, in.MessageBody, time.Duration(in.DelaySeconds)*time.Second)
		s.mu.Unlock()
		out = map[string]string{"MessageId": id, "MD5OfMessageBody": md5Hex(in.MessageBody)}
	case "ReceiveMessage":
		out = map[string]any{"Messages": s.receive(r, q, in.MaxNumberOfMessages, in.WaitTimeSeconds, in.VisibilityTimeout)}
	case "DeleteMessage":
		if !s.delete(q, in.ReceiptHandle) {
			fail(sqsError{status: http.StatusBadRequest, typ: "com.amazonaws.sqs#ReceiptHandleIsInvalid", query: "ReceiptHandleIsInvalid;Sender", message: "The input receipt handle is invalid."})
			return
		}
		out = map[string]any{}
	default:
		fail(sqsError{status: http.StatusBadRequest, typ: "com.amazon.coral.service#UnknownOperationException", message: "unknown operation " + target})
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(out)
}

type receivedMessage struct {
	MessageID     string `json:"MessageId"`
	ReceiptHandle string
	MD5OfBody     string
	Body          string
}

// receive takes up to limit (1..10, default 1) visible messages, hiding each for
// visibility seconds (default 30), waiting up to wait seconds (0..20) for one.
func (s *SQS) receive(r *http.Request, q *fakeQueue, limit int, wait, visibility *int) []receivedMessage {
	if limit < 1 || limit > 10 {
		limit = 1
	}
	hide := 30 * time.Second
	if visibility != nil {
		hide = time.Duration(*visibility) * time.Second
	}
	var deadline time.Time
	if wait != nil {
		deadline = time.Now().Add(time.Duration(min(max(*wait, 0), 20)) * time.Second)
	}
	for {
		s.mu.Lock()
		now := time.Now()
		var out []receivedMessage
		next := deadline
		for _, m := range q.msgs {
			if len(out) == limit {
				break
			}
			if m.visibleAt.After(now) {
				if next.IsZero() || m.visibleAt.Before(next) {
					next = m.visibleAt
				}
				continue
			}
			m.received++
			m.receipt = randomID()
			m.visibleAt = now.Add(hide)
			out = append(out, receivedMessage{MessageID: m.id, ReceiptHandle: m.receipt, MD5OfBody: md5Hex(m.body), Body: m.body})
		}
		wake := s.wake
		s.mu.Unlock()
		if len(out) > 0 || !now.Before(deadline) {
			return out
		}
		// Wait for a send, the next message to become visible, the deadline, or the
		// caller to give up.
		timer := time.NewTimer(min(time.Until(next), time.Until(deadline)))
		select {
		case <-wake:
		case <-timer.C:
		case <-r.Context().Done():
			timer.Stop()
			return nil
		}
		timer.Stop()
	}
}

// delete removes the message whose latest receipt handle is receipt.
func (s *SQS) delete(q *fakeQueue, receipt string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, m := range q.msgs {
		if m.receipt != "" && m.receipt == receipt {
			q.msgs = append(q.msgs[:i], q.msgs[i+1:]...)
			return true
		}
	}
	return false
}
