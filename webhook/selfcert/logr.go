package selfcert

import (
	"strings"

	"github.com/go-logr/logr"
	"github.com/sirupsen/logrus"
)

// newLogr adapts a logrus logger to logr, which controller-runtime and cert-controller
// log through. logr V(0) is info, V(1) and up are debug.
func newLogr(l logrus.FieldLogger) logr.Logger {
	return logr.New(&logrusSink{l: l})
}

type logrusSink struct {
	l    logrus.FieldLogger
	name string
}

func (s *logrusSink) Init(logr.RuntimeInfo) {}

func (s *logrusSink) Enabled(level int) bool {
	want := logrus.InfoLevel
	if level > 0 {
		want = logrus.DebugLevel
	}
	switch l := s.l.(type) {
	case *logrus.Entry:
		return l.Logger.IsLevelEnabled(want)
	case *logrus.Logger:
		return l.IsLevelEnabled(want)
	}
	return true
}

func (s *logrusSink) entry(kv []any) logrus.FieldLogger {
	e := s.l
	if s.name != "" {
		e = e.WithField("logger", s.name)
	}
	if f := fieldsOf(kv); len(f) > 0 {
		e = e.WithFields(f)
	}
	return e
}

func (s *logrusSink) Info(level int, msg string, kv ...any) {
	if level > 0 {
		s.entry(kv).Debug(msg)
		return
	}
	s.entry(kv).Info(msg)
}

func (s *logrusSink) Error(err error, msg string, kv ...any) {
	s.entry(kv).WithError(err).Error(msg)
}

func (s *logrusSink) WithValues(kv ...any) logr.LogSink {
	return &logrusSink{l: s.l.WithFields(fieldsOf(kv)), name: s.name}
}

func (s *logrusSink) WithName(name string) logr.LogSink {
	n := name
	if s.name != "" {
		n = strings.Join([]string{s.name, name}, ".")
	}
	return &logrusSink{l: s.l, name: n}
}

func fieldsOf(kv []any) logrus.Fields {
	f := logrus.Fields{}
	for i := 0; i+1 < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			continue
		}
		f[k] = kv[i+1]
	}
	return f
}
