package interruption

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// trackerRefresh is how often the tracker looks at its nodes again for signals whose
// node it did not know yet.
const trackerRefresh = 10 * time.Second

// Signals are the parts that read EC2's interruption signals (Settings.Queue): the
// tracker the loop asks, and the queue's poller.
type Signals struct {
	Tracker *Tracker
	poller  *Poller
	// changed is what a new signal calls, once the loop exists.
	changed atomic.Pointer[func()]
}

// NewSignals builds them when settings.Queue is set (nil otherwise), reading nodes. A
// queue that is missing or denies access does not fail: the poller logs, counts and
// retries.
func NewSignals(ctx context.Context, settings Settings, nodes Nodes, reg prometheus.Registerer, metricsNamespace string, log logrus.FieldLogger) (*Signals, error) {
	if settings.Queue == "" {
		return nil, nil
	}
	metrics, err := newMetrics(reg, metricsNamespace)
	if err != nil {
		return nil, err
	}
	sqsClient, region, err := newSQSClient(ctx, settings.Queue)
	if err != nil {
		return nil, err
	}
	s := &Signals{}
	s.Tracker, err = newTracker(trackerConfig{
		Nodes: nodes, Rule: settings.Rule, Metrics: metrics, Log: log,
		Changed: func() {
			if fn := s.changed.Load(); fn != nil {
				(*fn)()
			}
		},
	})
	if err != nil {
		return nil, err
	}
	s.poller = &Poller{Queue: sqsClient, Name: settings.Queue, Region: region,
		Handle: s.Tracker.Handle, Metrics: metrics, Log: log}
	log.WithFields(logrus.Fields{"queue": settings.Queue, "region": region}).Info("interruption signals on: " + settings.Rule.String())
	return s, nil
}

// OnChange sets what a new signal calls: the convergence loop's pass over every
// revision.
func (s *Signals) OnChange(fn func()) { s.changed.Store(&fn) }

// Run reads the queue and keeps the tracker current until ctx ends. Only the elected
// replica runs it: the loop acts on what it reads, and admission never waits on it.
func (s *Signals) Run(ctx context.Context) {
	go s.Tracker.Run(ctx, trackerRefresh)
	s.poller.Run(ctx)
}
