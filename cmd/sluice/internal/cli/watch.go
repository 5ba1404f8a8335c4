package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// watchSettle is how long `get --watch` waits after a change for more
// before it lists again: a rollout writes several keys per node step.
const watchSettle = 200 * time.Millisecond

// watchBuckets says on the channel returned that one of the buckets
// changed (a put or a delete after the watch started); changes that come
// together are said once. The watches end with ctx.
func watchBuckets(ctx context.Context, js jetstream.KeyValueManager, names []string) (<-chan struct{}, error) {
	changed := make(chan struct{}, 1)
	for _, name := range names {
		kv, err := bucket(ctx, js, name)
		if err != nil {
			return nil, err
		}
		w, err := kv.WatchAll(ctx, jetstream.UpdatesOnly(), jetstream.MetaOnly()) // that a key changed, not its value
		if err != nil {
			return nil, fmt.Errorf("watch bucket %s: %w", name, err)
		}
		go func() {
			defer func() { _ = w.Stop() }()
			for {
				select {
				case <-ctx.Done():
					return
				case e, ok := <-w.Updates():
					if !ok {
						return
					}
					if e == nil {
						continue
					}
					select {
					case changed <- struct{}{}:
					default: // one is pending already
					}
				}
			}
		}()
	}
	return changed, nil
}

// watchGet lists again (print) after each change, once changes have
// settled for watchSettle, and writes the listing when it differs from the
// last one written (last): on a terminal in place of it, else after a blank
// line. It returns nil when ctx ends (Ctrl-C).
func (a *app) watchGet(ctx context.Context, changed <-chan struct{}, last string, print func(io.Writer) error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
		settle := time.NewTimer(watchSettle)
		select {
		case <-ctx.Done():
			settle.Stop()
			return nil
		case <-settle.C:
		}
		var buf bytes.Buffer
		if err := print(&buf); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if buf.String() == last {
			continue
		}
		last = buf.String()
		sep := "\n"
		if a.streams.TTY {
			sep = "\033[H\033[2J" // home, clear screen
		}
		if _, err := io.WriteString(a.streams.Out, sep+last); err != nil {
			return err
		}
	}
}
