// Package logging builds the zerolog loggers of every sluice binary with the
// stable field names operators search by.
package logging

import (
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"
)

// Stable field names.
const (
	FieldComponent   = "component"
	FieldNode        = "node"
	FieldRevision    = "revision"
	FieldRollout     = "rollout"
	FieldFingerprint = "fingerprint"
	FieldReason      = "reason"
	FieldEvent       = "event"
	FieldBucket      = "bucket" // with FieldKey: a stored value, e.g. one quarantined because it does not decode
	FieldKey         = "key"
)

// New returns a logger writing to w: JSON, or human-readable when pretty.
func New(w io.Writer, level string, pretty bool) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		return zerolog.Nop(), err
	}
	if lvl == zerolog.NoLevel {
		lvl = zerolog.InfoLevel
	}
	if pretty {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// Default is New(os.Stderr, "info", false).
func Default() zerolog.Logger {
	l, _ := New(os.Stderr, "info", false)
	return l
}
