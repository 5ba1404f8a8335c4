package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/pkg/codec"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/contract/wellformed"
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
	// unreadable, when set, is why this agent cannot read the config: it
	// was written for a newer agent (fields this agent's schema does not
	// have). cfg then holds only what this agent could read of it (node,
	// fingerprint, rollout, operation...): it is reported INCOMPATIBLE,
	// never applied.
	unreadable error
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

// highest is the highest revision offered.
func (b *mailbox) highest() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seen
}

// forget forgets the highest revision offered: the store was replaced, and
// the new one's revisions count from 1 (storeid.go). What waits stays.
func (b *mailbox) forget() {
	b.mu.Lock()
	b.seen = 0
	b.mu.Unlock()
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

// putBack returns d, taken but not started (the pause held it), unless a
// newer one was offered since: the newest is what the worker takes next.
// Unlike offer it does not wake the worker, which the pause would only
// hold again: the resume wakes it.
func (b *mailbox) putBack(d desired) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.next == nil {
		b.next = &d
	}
}

// rawGetter is what the agent reads of the nodeconfigs bucket: its desired
// config's stored bytes, which it decodes itself (decodeDesired).
type rawGetter interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
}

// decodeDesired decodes node's stored desired config strictly (an unknown
// field is an error naming it) and checks it by the nodeconfigs bucket's
// one rule (pkg/contract/wellformed, the rule every service's reads apply):
// it names node, carries a config and a fingerprint, and the fingerprint is
// its config's. A cancel rewrites the same config with cancel set, so it
// passes.
func decodeDesired(node string, b []byte) (*sluicev1.DesiredConfig, error) {
	cfg := &sluicev1.DesiredConfig{}
	// Strictly (codec.Unmarshal keeps no unknown field): the other services
	// read values through pkg/store, which drops fields it does not know so
	// that a value written by a newer version still reads; the agent puts
	// what it decodes in force, and a misspelt field dropped silently would
	// put an emptier config in force than the one written.
	if err := codec.Unmarshal(b, cfg); err != nil {
		return nil, fmt.Errorf("it does not decode: %w", err)
	}
	if err := wellformed.Check(contract.BucketNodeConfigs, contract.DesiredKey(node), cfg); err != nil {
		return nil, fmt.Errorf("not well-formed for its key: %w", err)
	}
	return cfg, nil
}

// lenient decodes what this agent's schema knows of a desired config.
var lenient = protojson.UnmarshalOptions{DiscardUnknown: true}

// newerSchema is what this agent can read of b, a stored desired config
// that does not decode strictly, when it is a config written for a newer
// agent: once the fields this agent does not know are dropped it decodes,
// names node, carries a fingerprint, and names features this agent does
// not read (DesiredConfig.features). Anything else — garbage, a value of
// another type, a misspelt field — is nil: refused and quarantined. Its
// fingerprint is not checked against its config: the config read without
// the unknown fields is not the one fingerprinted.
func newerSchema(node string, features []string, b []byte) *sluicev1.DesiredConfig {
	cfg := &sluicev1.DesiredConfig{}
	if err := lenient.Unmarshal(b, cfg); err != nil || cfg.GetNode() != node || cfg.GetFingerprint() == "" ||
		contract.MissingFeatures(features, cfg.GetFeatures()) == nil {
		return nil
	}
	return cfg
}

// intake reads one stored value of the node's desired config (rev is its
// nodeconfigs revision, 0 when unknown): refused and reported when it does
// not decode or is not well-formed, else handed to accept. A config that
// needs features this agent does not read (written for a newer agent) is
// handed on marked unreadable, so that the worker reports it INCOMPATIBLE
// at once: a refusal alone left the coordinator waiting for an
// acknowledgement until the pickup deadline, and it then recorded a good
// config invalid (invariant I9).
func (a *Agent) intake(b []byte, rev uint64, from string) {
	cfg, err := decodeDesired(a.cfg.Node, b)
	if err != nil {
		if newer := newerSchema(a.cfg.Node, a.cfg.Features, b); newer != nil {
			a.accept(desired{cfg: newer, rev: rev, unreadable: a.needsFeatures(newer, err)}, from)
			return
		}
		// Retrying soon would read the same value: the next write or the
		// periodic resync brings another one.
		a.refuseDesired(rev, err, from)
		return
	}
	if contract.MissingFeatures(a.cfg.Features, cfg.GetFeatures()) != nil {
		// It decodes, but needs a feature this agent does not read (one
		// that changes what a field it knows means).
		a.accept(desired{cfg: cfg, rev: rev, unreadable: a.needsFeatures(cfg, nil)}, from)
		return
	}
	a.accept(desired{cfg: cfg, rev: rev}, from)
}

// needsFeatures says which features d needs that this agent does not
// read, and what the decoder said of it (decodeErr; nil when it decoded).
func (a *Agent) needsFeatures(d *sluicev1.DesiredConfig, decodeErr error) error {
	reads := strings.Join(a.cfg.Features, ", ")
	if reads == "" {
		reads = "none beyond the baseline schema"
	}
	err := fmt.Errorf("it needs config feature(s) %s, which this agent does not read (it reads: %s)",
		strings.Join(contract.MissingFeatures(a.cfg.Features, d.GetFeatures()), ", "), reads)
	if decodeErr != nil {
		err = fmt.Errorf("%w; %w", err, decodeErr)
	}
	return err
}

// receive handles one message republished from the nodeconfigs bucket.
func (a *Agent) receive(m *nats.Msg) {
	if op := m.Header.Get(kvOperationHeader); op == "DEL" || op == "PURGE" {
		a.log.Debug().Str("operation", op).Msg("desired config deleted; keeping what is in force")
		return
	}
	rev, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	a.intake(m.Data, rev, "republished write")
}

// fetchDesired reads the desired config with a Get, in case a republished
// write was missed (before start, while disconnected, or dropped). One
// attempt, bounded by store.AttemptTimeout: a Get that goes unanswered is
// asked again shortly, like any failed Get.
func (a *Agent) fetchDesired(ctx context.Context, why string) {
	actx, cancel := context.WithTimeout(ctx, store.AttemptTimeout)
	e, err := a.configs.Get(actx, contract.DesiredKey(a.cfg.Node))
	cancel()
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		a.retry.Reset() // answered: the control plane works
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
	a.retry.Reset()
	a.intake(e.Value(), e.Revision(), why)
}

// intake is what Run's loop knows about the desired configs it received;
// only that loop touches it.
type intake struct {
	// epoch is the highest leader epoch of a desired config accepted in this
	// process's life. It is deliberately not kept on disk: a control plane
	// wiped and started afresh counts epochs from the start again, and an
	// agent that remembered the old epochs would refuse every config of the
	// new control plane until its state dir was cleared. A restarted agent
	// learns the current epoch from the first config it reads.
	epoch uint64
	// staleRev is the nodeconfigs revision last reported as stale, so a
	// value re-read by every resync is reported once, not every 30 seconds
	// (a refused value is reported once by the agent's quarantine).
	staleRev uint64
	// storeID is the store identity (control/store.id) the epoch and the
	// mailbox's revisions were counted in; "" when not known (storeid.go).
	storeID string
}

// accept hands d, read by intake, to the worker unless it was written by a
// deposed leader: a desired config whose LeaderEpoch is lower than one
// already accepted. Epoch 0 (written by a version that did not set it) is
// always accepted. (intake refused a value that is not what the coordinator
// wrote before this fence: it says nothing about the coordinator's epoch.)
//
// Both fences count in one store: before refusing, the agent asks whether
// the store was replaced (storeReplaced: control/store.id changed), and if
// it was it forgets the old store's counts and takes d.
func (a *Agent) accept(d desired, from string) {
	if e := d.cfg.GetLeaderEpoch(); e != 0 && e < a.in.epoch &&
		!a.storeReplaced(d, fmt.Sprintf("leader epoch %d, lower than epoch %d already seen", e, a.in.epoch), from) {
		a.staleDesired(d, from)
		return
	}
	if d.cfg.GetCancel() && a.cancelRunning(d.cfg) {
		a.log.Info().Str("operation", d.cfg.GetOperation()).Str("from", from).Msg("the coordinator cancelled the running operation; stopping it")
	}
	if !a.box.offer(d) && (!a.storeReplaced(d, fmt.Sprintf("nodeconfigs revision %d, lower than revision %d already received", d.rev, a.box.highest()), from) ||
		!a.box.offer(d)) {
		a.log.Debug().Uint64("kv_revision", d.rev).Str("from", from).Msg("ignoring desired config older than one already received")
		return
	}
	a.in.epoch = max(a.in.epoch, d.cfg.GetLeaderEpoch())
}

// staleDesired reports a desired config written by a deposed leader, once
// per revision; the config in force stays.
func (a *Agent) staleDesired(d desired, from string) {
	if d.rev != 0 && d.rev == a.in.staleRev {
		a.log.Debug().Uint64("kv_revision", d.rev).Str("from", from).Msg("stale desired config read again; still ignored")
		return
	}
	a.in.staleRev = d.rev
	reason := fmt.Sprintf("desired %s was written by leader epoch %d, lower than epoch %d already seen: a deposed coordinator wrote it; ignored, the config in force stays",
		describe(d.cfg), d.cfg.GetLeaderEpoch(), a.in.epoch)
	a.log.Warn().Uint64("kv_revision", d.rev).Uint64("leader_epoch", d.cfg.GetLeaderEpoch()).Uint64("highest_epoch", a.in.epoch).
		Str("from", from).Str(logging.FieldReason, reason).Msg("ignoring stale desired config")
	a.emit(EventStaleDesiredIgnored, reason, d.cfg)
}

// refuseDesired reports a desired config that intake refused, once per
// revision (the agent's quarantine). It is never applied: the node keeps
// the config in force until the coordinator writes one that passes.
func (a *Agent) refuseDesired(rev uint64, why error, from string) {
	if !a.quarantine.Report(contract.BucketNodeConfigs, contract.DesiredKey(a.cfg.Node), rev, why,
		"refused: the config in force stays until the coordinator writes one that decodes and matches its fingerprint") {
		a.log.Debug().Uint64("kv_revision", rev).Str("from", from).Msg("refused desired config read again; still refused")
	}
}
