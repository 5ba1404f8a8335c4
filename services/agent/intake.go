package agent

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// kvOperationHeader marks a republished KV delete or purge (values "DEL", "PURGE").
const kvOperationHeader = "KV-Operation"

// desired is a desired config and the nodeconfigs revision it was stored at
// (0 when unknown).
type desired struct {
	cfg *sluicev1.DesiredConfig
	rev uint64
}

// mailbox hands desired configs to the worker, keeping only the newest: if
// several arrive while an apply runs, only the last is applied next.
type mailbox struct {
	mu   sync.Mutex
	next *desired      // newest not yet taken
	seen uint64        // highest revision offered
	wake chan struct{} // capacity 1: something is waiting
}

// offer queues d unless a newer revision was already offered (a Get that
// raced a republished write must not undo it). The same revision again is
// accepted: the worker's plan decides whether it needs anything.
func (b *mailbox) offer(d desired) bool {
	b.mu.Lock()
	if d.rev != 0 && d.rev < b.seen {
		b.mu.Unlock()
		return false
	}
	b.seen = max(b.seen, d.rev)
	b.next = &d
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return true
}

// take returns the newest desired config not yet taken.
func (b *mailbox) take() (desired, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.next == nil {
		return desired{}, false
	}
	d := *b.next
	b.next = nil
	return d, true
}

// receive handles one message republished from the nodeconfigs bucket.
func (a *Agent) receive(m *nats.Msg) {
	if op := m.Header.Get(kvOperationHeader); op == "DEL" || op == "PURGE" {
		a.log.Debug().Str("operation", op).Msg("desired config deleted; keeping what is in force")
		return
	}
	cfg := &sluicev1.DesiredConfig{}
	if err := store.Unmarshal(m.Data, cfg); err != nil {
		a.log.Warn().Err(err).Msg("ignoring undecodable desired config")
		return
	}
	rev, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	a.accept(desired{cfg: cfg, rev: rev}, "republished write")
}

// fetchDesired reads the desired config with a Get, in case a republished
// write was missed (before start, while disconnected, or dropped).
func (a *Agent) fetchDesired(ctx context.Context, why string) {
	e, err := a.configs.Get(ctx, contract.DesiredKey(a.cfg.Node))
	if errors.Is(err, store.ErrNotFound) {
		a.log.Debug().Str(logging.FieldReason, why).Msg("no desired config yet")
		return
	}
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn().Err(err).Str(logging.FieldReason, why).Msg("fetch desired config; retrying shortly")
			a.resyncSoon(ctx)
		}
		return
	}
	a.accept(desired{cfg: e.Value, rev: e.Revision}, why)
}

func (a *Agent) accept(d desired, from string) {
	if n := d.cfg.GetNode(); n != "" && n != a.cfg.Node {
		a.log.Warn().Str("for", n).Str("from", from).Msg("ignoring desired config addressed to another node")
		return
	}
	if !a.box.offer(d) {
		a.log.Debug().Uint64("kv_revision", d.rev).Str("from", from).Msg("ignoring desired config older than one already received")
	}
}
