package embedded

// Re-opening JetStream after a store write error (a full disk), so a
// single embedded server recovers once space is freed, with no restart.
//
// What nats-server 2.15 does on a write error it does not expect (ENOSPC
// from a message block's write or flush is one): fileStore.setWriteErr
// keeps it in the stream's file store and stream.setWriteErrLocked in the
// stream (server/filestore.go, server/stream.go, processJetStreamMsg).
// Neither is ever cleared: every later write to that stream fails with the
// kept error before touching the disk, and processJetStreamMsg does not
// answer it, so the client's write times out for as long as the stream
// object lives. Streams that never failed a write go on working. A
// permission error shuts JetStream down altogether (ShutdownJetStream).
// Only new stream objects, read again from the store directory, are free
// of the error: ShutdownJetStream then EnableJetStream builds them, keeping
// every acknowledged message, within the running server (its client
// connections stay up; in-flight JetStream requests fail and are retried).

import (
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/logging"
)

const (
	// healCheck is how often the server's streams are checked for a kept
	// write error (Healthz reads the store directory's stream names).
	healCheck = time.Second
	// healFree is the space the store's file system must have before
	// JetStream is re-opened: re-opening writes the streams' index files,
	// and a re-open into a disk still full only fails again.
	healFree = 4 << 20
	// healFirst and healMax bound the wait between re-opens while the
	// error comes back (space freed, then taken again), doubling.
	healFirst = 2 * time.Second
	healMax   = time.Minute
)

// storeTrouble says what keeps JetStream from writing, or "" when nothing.
// A server shutting down has none: Shutdown stops JetStream after it
// stops running, and a re-open then would write into a store its owner
// is about to remove (CI once failed a test's TempDir cleanup so).
func storeTrouble(s *server.Server) string {
	if !s.Running() {
		return ""
	}
	if !s.JetStreamEnabled() {
		return "JetStream is disabled"
	}
	h := s.Healthz(&server.HealthzOptions{Details: true})
	for _, e := range h.Errors {
		if e.Type == server.HealthzErrorStream && strings.Contains(e.Error, "write error") {
			return e.Error
		}
	}
	return ""
}

// heal re-opens s's JetStream, stored under storeDir, whenever a stream
// keeps a write error (or JetStream was shut down) and the store's file
// system has healFree bytes free; it returns when s shuts down.
func heal(s *server.Server, storeDir string, log zerolog.Logger) {
	down := make(chan struct{})
	go func() { s.WaitForShutdown(); close(down) }()
	tick := time.NewTicker(healCheck)
	defer tick.Stop()
	st := healState{wait: healFirst}
	for {
		select {
		case <-down:
			return
		case now := <-tick.C:
			trouble := storeTrouble(s)
			var free uint64
			var freeErr error
			if trouble != "" {
				free, freeErr = freeBytes(storeDir)
			}
			var act healAction
			st, act = decideHeal(st, trouble, free, freeErr == nil, now)
			ev := log.Warn().Str(logging.FieldReason, trouble).Uint64("free_bytes", free).Str("store_dir", storeDir)
			switch act {
			case healNone:
				continue
			case healWarnWaiting:
				ev.Msg("JetStream cannot write its store; it is re-opened once the store's disk has 4 MiB free")
			case healReopen:
				ev.Msg("re-opening JetStream: a stream kept a write error; space is free again")
				if err := reopen(s, storeDir); err != nil {
					log.Error().Err(err).Msg("re-open JetStream")
				}
			}
		}
	}
}

// healState is what heal remembers between checks.
type healState struct {
	next    time.Time     // no re-open before it
	wait    time.Duration // the spacing after the next re-open
	waiting bool          // logged that it waits for space
}

// healAction is what a check does.
type healAction int

const (
	healNone        healAction = iota
	healWarnWaiting            // log once that it waits for space
	healReopen                 // re-open JetStream
)

// decideHeal is one check: trouble is storeTrouble's answer, free the
// store's free bytes (known: whether they could be read; if not, it
// re-opens without the check).
func decideHeal(st healState, trouble string, free uint64, known bool, now time.Time) (healState, healAction) {
	if trouble == "" {
		st.waiting = false
		if !st.next.IsZero() && now.Sub(st.next) > healMax { // well for a while: start the spacing over
			st.next, st.wait = time.Time{}, healFirst
		}
		return st, healNone
	}
	if now.Before(st.next) {
		return st, healNone
	}
	if known && free < healFree {
		if st.waiting {
			return st, healNone
		}
		st.waiting = true
		return st, healWarnWaiting
	}
	st.waiting = false
	st.next, st.wait = now.Add(st.wait), min(2*st.wait, healMax)
	return st, healReopen
}

// reopen shuts s's JetStream down and enables it again on storeDir with
// the configuration it started with (limits derived from the disk).
func reopen(s *server.Server, storeDir string) error {
	if !s.Running() { // shut down since the check
		return nil
	}
	if s.JetStreamEnabled() {
		if err := s.ShutdownJetStream(); err != nil {
			return err
		}
	}
	return s.EnableJetStream(&server.JetStreamConfig{StoreDir: storeDir, Strict: true, CompressOK: true})
}
