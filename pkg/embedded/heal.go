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
func storeTrouble(s *server.Server) string {
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
	wait, next := healFirst, time.Time{}
	waiting := false // logged that it waits for space
	for {
		select {
		case <-down:
			return
		case now := <-tick.C:
			trouble := storeTrouble(s)
			if trouble == "" {
				waiting = false
				if !next.IsZero() && now.Sub(next) > healMax {
					wait, next = healFirst, time.Time{}
				}
				continue
			}
			if now.Before(next) {
				continue
			}
			free, err := freeBytes(storeDir)
			if err == nil && free < healFree {
				if !waiting {
					log.Warn().Str("reason", trouble).Uint64("free_bytes", free).Str("store_dir", storeDir).
						Msg("JetStream cannot write its store; it is re-opened once the store's disk has 4 MiB free")
					waiting = true
				}
				continue
			}
			log.Warn().Str("reason", trouble).Uint64("free_bytes", free).Str("store_dir", storeDir).
				Msg("re-opening JetStream: a stream kept a write error; space is free again")
			if err := reopen(s, storeDir); err != nil {
				log.Error().Err(err).Msg("re-open JetStream")
			}
			waiting = false
			next, wait = now.Add(wait), min(2*wait, healMax)
		}
	}
}

// reopen shuts s's JetStream down and enables it again on storeDir with
// the configuration it started with (limits derived from the disk).
func reopen(s *server.Server, storeDir string) error {
	if s.JetStreamEnabled() {
		if err := s.ShutdownJetStream(); err != nil {
			return err
		}
	}
	return s.EnableJetStream(&server.JetStreamConfig{StoreDir: storeDir, Strict: true, CompressOK: true})
}
