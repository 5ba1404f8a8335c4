// Package events records state transitions: each Emit logs once at info with
// the stable fields and publishes the Event on the events stream.
package events

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Kinds of things events are about (defined once, in contract).
const (
	KindNode        = contract.KindNode
	KindRollout     = contract.KindRollout
	KindRevision    = contract.KindRevision
	KindIntent      = contract.KindIntent
	KindFingerprint = contract.KindFingerprint
	KindLeader      = contract.KindLeader
	KindQuarantine  = contract.KindQuarantine
)

// Publisher is what the emitter needs of JetStream.
type Publisher interface {
	PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error)
	PublishAsyncComplete() <-chan struct{}
}

// Emitter logs and publishes events for one component.
type Emitter struct {
	pub       Publisher
	log       zerolog.Logger
	component string
	now       func() time.Time
}

// NewEmitter returns an Emitter; pub may be nil to only log.
func NewEmitter(pub Publisher, log zerolog.Logger, component string, now func() time.Time) *Emitter {
	if now == nil {
		now = time.Now
	}
	return &Emitter{pub: pub, log: log, component: component, now: now}
}

// Emit logs ev once at info and publishes it without waiting for the ack:
// state is already stored when an event is emitted, so a lost event loses
// history, never state. The Kind and Id fields, with the role the
// component connects as, name the subject (contract.EventSubjectOf).
func (e *Emitter) Emit(ev *sluicev1.Event) { e.emit(ev, zerolog.InfoLevel) }

// emit is Emit with the level of its log line.
func (e *Emitter) emit(ev *sluicev1.Event, level zerolog.Level) {
	if ev.Time == nil {
		ev.Time = timestamppb.New(e.now())
	}
	ev.Component = e.component
	l := e.log.WithLevel(level).Str(logging.FieldComponent, e.component).Str(logging.FieldEvent, ev.Type)
	for _, f := range []struct{ k, v string }{
		{logging.FieldNode, ev.Node}, {logging.FieldRevision, ev.Revision},
		{logging.FieldRollout, ev.Rollout}, {logging.FieldFingerprint, ev.Fingerprint},
		{logging.FieldBucket, ev.Bucket}, {logging.FieldKey, ev.Key}, {logging.FieldGate, ev.Gate},
	} {
		if f.v != "" {
			l = l.Str(f.k, f.v)
		}
	}
	l.Str(logging.FieldReason, ev.Reason).Msg(ev.Type)
	if role := contract.RoleOfComponent(e.component); role != "" && !contract.MayPublishEvent(role, ev.Kind, ev.Type) {
		// A type missing from the contract's table: every reader shows it
		// as unreadable (Read). Said where the developer will look first.
		e.log.Error().Str(logging.FieldEvent, ev.Type).Str("kind", ev.Kind).Str("role", role).
			Msg("event type not in the table of pkg/contract/publishers.go for this role and kind: readers show it as unreadable")
	}
	if e.pub == nil {
		return
	}
	b, err := store.Marshal(ev)
	if err != nil {
		e.log.Error().Err(err).Msg("encode event")
		return
	}
	msg := &nats.Msg{Subject: contract.EventSubjectOf(contract.RoleOfComponent(e.component), ev.Kind, ev.Id), Data: b}
	if _, err := e.pub.PublishMsgAsync(msg); err != nil {
		e.log.Warn().Err(err).Str(logging.FieldEvent, ev.Type).Msg("publish event")
	}
}

// Flush waits until published events are acknowledged or ctx ends.
func (e *Emitter) Flush(ctx context.Context) {
	if e.pub == nil {
		return
	}
	select {
	case <-e.pub.PublishAsyncComplete():
	case <-ctx.Done():
	}
}
