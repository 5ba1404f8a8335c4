package store

import "errors"

// The errors this package returns that a caller branches on, in one place:
// the sentinels below, matched with errors.Is, and *StorageError
// (storage.go, with the words it puts on JetStream's storage errors),
// matched with errors.As or AsStorageError.

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
	// has no room: a *StorageError (storage.go says which errors those are).
	ErrStorageFull = errors.New("the store is full")
)

// errDirectConflict is the server's refusal of a direct write whose
// expected revision was not the key's (wrap adds ErrConflict).
var errDirectConflict = errors.New("wrong last revision")
