package registry

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// changeWatch is the part of a registry that watches for changes in the
// background: it runs one goroutine, started by the first call of Changed
// and stopped by Close, which nudges Changed and keeps the Note.
type changeWatch struct {
	log     zerolog.Logger
	run     func(ctx context.Context) // the watch loop; returns when ctx is done
	changed chan struct{}

	mu      sync.Mutex
	note    string
	started bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{}
}

func newChangeWatch(log zerolog.Logger, run func(ctx context.Context)) *changeWatch {
	// One buffered nudge is enough: the configurator reads the whole
	// registry on a nudge, so nudges that come while one waits add nothing.
	return &changeWatch{log: log, run: run, changed: make(chan struct{}, 1)}
}

// Changed starts the watch on first use, so that opening a registry does
// no I/O.
func (w *changeWatch) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started && !w.closed {
		w.started = true
		ctx, cancel := context.WithCancel(context.Background())
		w.cancel, w.done = cancel, make(chan struct{})
		go func() {
			defer close(w.done)
			w.run(ctx)
		}()
	}
	return w.changed
}

// Note is what the watch loop last said an operator should know.
func (w *changeWatch) Note() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.note
}

// stop ends the watch loop and waits for it. It is safe to call twice.
func (w *changeWatch) stop() {
	w.mu.Lock()
	w.closed = true
	cancel, done := w.cancel, w.done
	w.cancel = nil
	w.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// nudge tells Changed's reader to sync soon, without ever blocking.
func (w *changeWatch) nudge() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// setNote replaces the note, logging when it changes.
func (w *changeWatch) setNote(note string) {
	w.mu.Lock()
	old := w.note
	w.note = note
	w.mu.Unlock()
	switch {
	case note == old:
	case note == "":
		w.log.Info().Str("reason", "watch established").Msg("registry changes are seen as they happen")
	default:
		w.log.Info().Str("reason", note).Msg("registry changes are seen at the next sync only")
	}
}

// sleep waits d or until ctx is done; false when ctx is done.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// digest computes a Snapshot.Version from (name, content) pairs written in
// Origin order. Every field is length-prefixed, so no two different
// sequences of pairs hash alike.
type digest struct{ h hash.Hash }

func newDigest() digest { return digest{h: sha256.New()} }

func (d digest) add(fields ...string) {
	var n [8]byte
	for _, f := range fields {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		d.h.Write(n[:])
		d.h.Write([]byte(f))
	}
}

func (d digest) String() string { return hex.EncodeToString(d.h.Sum(nil)) }
