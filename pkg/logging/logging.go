// Package logging builds the zerolog loggers of every sluice binary with the
// stable field names operators search by.
package logging

import (
	"fmt"
	"io"
	"os"

	"github.com/rs/zerolog"
)

// Stable field names.
const (
	FieldComponent   = "component"
	FieldNode        = "node"
	FieldRevision    = "revision"
	FieldRollout     = "rollout"
	FieldGate        = "gate" // a rollout gate's name
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
		// Colors only on a terminal: text piped to a file stays plain.
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "2006-01-02 15:04:05.000", NoColor: !isTerminal(w)}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

// Log formats: FormatJSON (one JSON object a line, for collectors),
// FormatText (human-readable: time, level, message, fields), and FormatAuto,
// text when the output is a terminal, else JSON.
const (
	FormatAuto = "auto"
	FormatJSON = "json"
	FormatText = "text"
)

// Pretty reports whether format asks for human-readable output on w: text,
// or auto on a terminal. An unknown format is an error naming the choices.
func Pretty(format string, w io.Writer) (bool, error) {
	switch format {
	case FormatText:
		return true, nil
	case FormatJSON:
		return false, nil
	case FormatAuto, "":
		return isTerminal(w), nil
	}
	return false, fmt.Errorf("%q: want %s, %s or %s", format, FormatAuto, FormatText, FormatJSON)
}

// isTerminal reports whether w is a character device (a terminal), as
// isatty does, without a dependency.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Default is New(os.Stderr, "info", false).
func Default() zerolog.Logger {
	l, _ := New(os.Stderr, "info", false)
	return l
}
