package dev

import (
	"io"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/logging"
)

// newLogger logs JSON to file and, human-readable, to stderr: every line
// with verbose, else errors only, so that a failure is never silent.
func newLogger(file, stderr io.Writer, level string, verbose bool) (zerolog.Logger, error) {
	min := zerolog.ErrorLevel
	if verbose {
		min = zerolog.TraceLevel
	}
	console := minLevelWriter{w: zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.TimeOnly}, min: min}
	return logging.New(zerolog.MultiLevelWriter(file, console), level, false)
}

// minLevelWriter drops lines below min.
type minLevelWriter struct {
	w   io.Writer
	min zerolog.Level
}

func (m minLevelWriter) Write(p []byte) (int, error) { return m.w.Write(p) }

func (m minLevelWriter) WriteLevel(l zerolog.Level, p []byte) (int, error) {
	if l < m.min {
		return len(p), nil
	}
	return m.w.Write(p)
}
