package kubenode

import (
	"github.com/go-logr/logr"
	"github.com/rs/zerolog"
)

// zerologSink hands client-go's own log lines (its reflector's "watch ended
// with error" and the like, logged through the context's logr logger) to a
// zerolog logger, so the agent's log stays one JSON stream. Verbosity 0 is
// info, 1 and 2 debug; client-go's finer levels are dropped.
type zerologSink struct {
	log zerolog.Logger
}

var _ logr.LogSink = zerologSink{}

func newLogr(log zerolog.Logger) logr.Logger {
	return logr.New(zerologSink{log: log.With().Str("logger", "client-go").Logger()})
}

func (zerologSink) Init(logr.RuntimeInfo) {}

func (s zerologSink) Enabled(level int) bool {
	return level <= 2 && s.event(level).Enabled()
}

func (s zerologSink) event(level int) *zerolog.Event {
	if level == 0 {
		return s.log.Info()
	}
	return s.log.Debug()
}

func (s zerologSink) Info(level int, msg string, kv ...any) {
	s.event(level).Fields(kv).Msg(msg)
}

func (s zerologSink) Error(err error, msg string, kv ...any) {
	s.log.Warn().Err(err).Fields(kv).Msg(msg)
}

func (s zerologSink) WithValues(kv ...any) logr.LogSink {
	return zerologSink{log: s.log.With().Fields(kv).Logger()}
}

func (s zerologSink) WithName(name string) logr.LogSink {
	return zerologSink{log: s.log.With().Str("logger_name", name).Logger()}
}
