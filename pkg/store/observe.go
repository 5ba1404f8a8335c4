package store

import (
	"context"
	"errors"
	"sync/atomic"
)

// Kinds of failed writes a WriteObserver is told of.
const (
	// FailureConflict: a compare-and-set lost (the key moved, exists or is
	// gone): the writer re-reads and decides again.
	FailureConflict = "conflict"
	// FailureError: any other failure (timeout, no responders, a refused
	// batch): the write may or may not have landed.
	FailureError = "error"
)

// WriteObserver is told of every write (Create, Update, Delete, an atomic
// batch, a fenced write) that failed, with the bucket and the kind of
// failure (FailureConflict or FailureError). The binaries count them as a
// metric; this package stays free of any metrics library. WriteFailed must
// not block.
type WriteObserver interface {
	WriteFailed(bucket, kind string)
}

var observer atomic.Pointer[WriteObserver]

// SetWriteObserver makes o the observer of failed writes of every Store and
// Batcher in the process (nil: none). A binary sets it once at start.
func SetWriteObserver(o WriteObserver) {
	if o == nil {
		observer.Store(nil)
		return
	}
	observer.Store(&o)
}

// observe tells the observer of err, a write's result. A write abandoned
// because its caller's ctx ended (a shutdown) is not a failure of the store.
func observe(ctx context.Context, bucket string, err error) {
	if ctx.Err() != nil {
		return
	}
	noteWrite(err)
	if err == nil {
		return
	}
	o := observer.Load()
	if o == nil {
		return
	}
	kind := FailureError
	if errors.Is(err, ErrConflict) || errors.Is(err, ErrNotFound) {
		kind = FailureConflict
	}
	(*o).WriteFailed(bucket, kind)
}
