package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/pkg/store"
)

// unreadableKey is a stored value that does not decode. Listings show it
// and carry on: one bad value must not hide the rest of the fleet, and the
// exit code does not change because of it.
type unreadableKey struct {
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
	Reason string `json:"reason"`
}

// newUnreadable describes the value at bucket/key that failed with err
// (a store.ErrUndecodable).
func newUnreadable(bucket, key string, err error) unreadableKey {
	return unreadableKey{Bucket: bucket, Key: key, Reason: strings.TrimPrefix(err.Error(), "decode "+bucket+"/"+key+": ")}
}

// cell is how a table shows the value in place of its row.
func (u unreadableKey) cell() string {
	return fmt.Sprintf("<unreadable: %s/%s %s>", u.Bucket, u.Key, u.Reason)
}

// unreadableHint tells an operator what to do about n unreadable values.
func unreadableHint(n int) string {
	return fmt.Sprintf("%d stored value(s) do not decode and are shown as <unreadable>: a node's agent rewrites its own status; "+
		"look at any other with `nats kv get BUCKET KEY` and have its writer rewrite it, or delete it", n)
}

// undecodable reports whether err says a stored value does not decode.
func undecodable(err error) bool { return errors.Is(err, store.ErrUndecodable) }
