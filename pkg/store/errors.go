package store

import (
	"errors"
	"fmt"
)

// The errors this package returns that a caller branches on, in one place:
// the sentinels below, matched with errors.Is, and *StorageError (the
// words it puts on JetStream's storage errors; storage.go says which those
// are), matched with errors.As or AsStorageError.

// Errors, matched with errors.Is.
var (
	// ErrNotFound: the key does not exist or was deleted.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the key changed since the revision the write expected.
	ErrConflict = errors.New("revision conflict")
	// ErrInFlight: on a cluster, another write whose expected-sequence check
	// names the same key was still in flight (JetStream error 10164): this
	// one was refused without being stored. It also matches ErrConflict. The
	// Batcher asks again by itself; asking again is safe, since a real
	// conflict then fails the check outright.
	ErrInFlight = errors.New("a write checking the same key is in flight")
	// ErrUndecodable: the stored value is not a valid protojson T, or it
	// decodes but is not well-formed for its key (wellformed.Check: valid
	// JSON of another type decodes as an empty T). Get returns it with the
	// entry's Key and Revision set, so the key's owner can overwrite the
	// value with compare-and-set; the error says why.
	ErrUndecodable = errors.New("value does not decode")
	// ErrUnchanged, returned by a Mutate function, means there is nothing
	// to write.
	ErrUnchanged = errors.New("unchanged")
	// ErrBatchRejected wraps the server's refusal of a batch; a failed
	// compare-and-set (of an op or of the fence) also matches ErrConflict.
	ErrBatchRejected = errors.New("atomic batch rejected")
	// ErrStorageFull is matched by every write error that says the store
	// has no room: a *StorageError.
	ErrStorageFull = errors.New("the store is full")
)

// errDirectConflict is the server's refusal of a direct write whose
// expected revision was not the key's (wrap adds ErrConflict).
var errDirectConflict = errors.New("wrong last revision")

// errNoStreamInfo: a bucket's status carried no stream info (View).
var errNoStreamInfo = errors.New("the bucket's status has no stream info")

// StorageError is a write refused for want of space, in sluice's words. It
// unwraps to ErrStorageFull and to the JetStream error.
type StorageError struct {
	Code        int    // the JetStream API error code
	Description string // the server's description
	Err         error  // the JetStream error
}

func (e *StorageError) Error() string {
	what, todo := "the store's disk is full", "free space on the NATS server's JetStream store (store_dir), or raise its max_file_store"
	switch e.Code {
	case CodeAccountResourcesExceeded:
		what, todo = "the store is full for this account", "raise the account's JetStream storage limit (max_file/max_mem in its jetstream settings), or free space"
	case CodeMemoryResourcesExceeded:
		what, todo = "the store's memory is full", "raise the NATS server's max_memory_store, or free memory"
	case CodeStreamStoreFailed:
		what, todo = "the bucket is at its size limit", "raise the bucket's max_bytes, or let the reaper remove what is no longer referenced"
	}
	return fmt.Sprintf("%s (JetStream error %d, %s): %s", what, e.Code, e.Description, todo)
}

func (e *StorageError) Unwrap() []error { return []error{ErrStorageFull, e.Err} }
