package buckets

import (
	"errors"
	"fmt"
)

// The errors of this package that a caller branches on, in one place.

// ErrMismatch is returned by Open and Prepare when a bucket or stream exists
// with settings a component cannot work with or may not change. Match with errors.Is; the error is a
// *MismatchError that says what to do.
var ErrMismatch = errors.New("bucket settings mismatch")

// MismatchError says which setting of which bucket or stream differs, the
// value found and the value wanted, and what to do about it.
type MismatchError struct {
	Kind      string // "bucket" or "stream"
	Name      string // bucket or stream name
	Setting   string // replicas, storage, ttl, allow_atomic
	Found     string
	Want      string
	Component string // who found it
	Manager   string // who manages it
	Fix       string // what to do
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%s %s: %s is %s, %s wants %s (managed by %s): %s",
		e.Kind, e.Name, e.Setting, e.Found, e.Component, e.Want, e.Manager, e.Fix)
}

// Is makes errors.Is(err, ErrMismatch) hold.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }
