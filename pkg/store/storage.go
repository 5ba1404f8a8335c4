package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The words sluice uses for JetStream's storage errors, in one place: every
// write through this package (Store, Batcher) is wrapped with them, so the
// CLI's errors, the services' logs and /readyz (StorageTrouble) say "the
// store's disk is full" instead of an error code or a bare timeout.
//
// What a client sees, from nats-server 2.15's stream.go and filestore.go
// (docs/operations.md, "A full store"):
//
//   - The server's own limit for JetStream storage (max_file_store,
//     max_memory_store) reached: the write is answered with error 10023,
//     "insufficient resources"; creating a stream past it, 10047.
//   - The account's limit reached: 10002; a bucket's own max_bytes: 10077
//     "maximum bytes exceeded".
//   - The disk itself full (ENOSPC) on a single server: the write is NOT
//     answered. The server logs "JetStream failed to store a msg … no space
//     left on device" and "critical write error", and marks the stream's
//     store failed: every later write to that stream fails the same way,
//     unanswered, even once space is freed, until the server restarts. A
//     client sees only its own timeout, so a write's timeout says so too.

// JetStream API error codes of storage (nats-server's errors.json).
const (
	CodeAccountResourcesExceeded = 10002 // JSAccountResourcesExceededErr
	CodeInsufficientResources    = 10023 // JSInsufficientResourcesErr: the server's max_file_store / max_memory_store
	CodeMemoryResourcesExceeded  = 10028 // JSMemoryResourcesExceededErr
	CodeStorageResourcesExceeded = 10047 // JSStorageResourcesExceededErr
	CodeStreamStoreFailed        = 10077 // JSStreamStoreFailedF: the store's own error, e.g. "maximum bytes exceeded"
)

// AsStorageError returns err as a *StorageError when JetStream refused it
// for want of space, else nil.
func AsStorageError(err error) *StorageError {
	if err == nil {
		return nil
	}
	var se *StorageError
	if errors.As(err, &se) {
		return se
	}
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		var jse jetstream.JetStreamError
		if !errors.As(err, &jse) || jse.APIError() == nil {
			return nil
		}
		api = jse.APIError()
	}
	switch code := int(api.ErrorCode); code {
	case CodeAccountResourcesExceeded, CodeInsufficientResources, CodeMemoryResourcesExceeded, CodeStorageResourcesExceeded:
	case CodeStreamStoreFailed:
		if !strings.Contains(api.Description, "maximum bytes") && !strings.Contains(api.Description, "no space left") {
			return nil
		}
	default:
		return nil
	}
	return &StorageError{Code: int(api.ErrorCode), Description: api.Description, Err: err}
}

// timeoutHint is added to a write's timeout: a single server whose disk is
// full answers no write at all (see above).
const timeoutHint = "JetStream did not acknowledge the write in time; if every write times out, look at the NATS server's log: " +
	`a server whose store's disk is full answers no write ("no space left on device") until space is freed and it is restarted (sluice dev's own server re-opens its store by itself)`

// explain puts sluice's words on a write's error: a *StorageError for a
// refusal for want of space, the timeout hint for a timeout; err as it is
// otherwise.
func explain(err error) error {
	if se := AsStorageError(err); se != nil {
		return se
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
		return fmt.Errorf("%s: %w", timeoutHint, err)
	}
	return err
}

// trouble is the process's last write refused for want of space, cleared
// by the next write that lands.
var trouble struct {
	sync.Mutex
	err   *StorageError
	since time.Time
}

// noteWrite records a write's outcome for StorageTrouble.
func noteWrite(err error) {
	se := AsStorageError(err)
	if se == nil && err != nil {
		return // another failure says nothing about space
	}
	trouble.Lock()
	defer trouble.Unlock()
	switch {
	case se == nil:
		trouble.err = nil
	case trouble.err == nil:
		trouble.err, trouble.since = se, time.Now()
	default:
		trouble.err = se
	}
}

// StorageTrouble reports the storage error of this process's writes since
// when, nil while the last write landed or failed otherwise: what /readyz
// says (pkg/cmdutil).
func StorageTrouble() (*StorageError, time.Time) {
	trouble.Lock()
	defer trouble.Unlock()
	return trouble.err, trouble.since
}
