package cli

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/store"
)

// unreadableKey is a stored value that does not decode (view.Unreadable).
type unreadableKey = view.Unreadable

// newUnreadable describes the value at bucket/key that failed with err.
func newUnreadable(bucket, key string, err error) unreadableKey {
	return view.NewUnreadable(bucket, key, err)
}

// unreadableHint tells an operator what to do about n unreadable values.
func unreadableHint(n int) string {
	return fmt.Sprintf("%d stored value(s) do not decode and are shown as <unreadable>: a node's agent rewrites its own status; "+
		"look at any other with `nats kv get BUCKET KEY` and have its writer rewrite it, or delete it", n)
}

// undecodable reports whether err says a stored value does not decode.
func undecodable(err error) bool { return errors.Is(err, store.ErrUndecodable) }
