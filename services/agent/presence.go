package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// presence is the agent's heartbeat lease in the nodes bucket.
type presence struct {
	started    time.Time
	rev        uint64 // revision this agent last wrote; 0 = none yet
	registered bool   // written at least once since Run started
}

// heartbeat writes the node's presence: an Update on the revision last
// written, or, when that fails because the key moved or expired, a re-read
// and Create or Update. A failure is logged and retried on the next beat;
// the lease is three beats long.
func (a *Agent) heartbeat(ctx context.Context) {
	p := &sluicev1.NodePresence{
		Node:         a.cfg.Node,
		Labels:       a.cfg.Labels,
		AgentVersion: a.cfg.Version,
		StartedAt:    timestamppb.New(a.pres.started),
		HeartbeatAt:  timestamppb.New(a.cfg.Now()),
		Pause:        a.currentAck(),
	}
	if a.pres.rev != 0 {
		rev, err := a.nodes.Update(ctx, a.cfg.Node, p, a.pres.rev)
		if err == nil {
			a.pres.rev = rev
			return
		}
		if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
			a.warnUnlessDone(ctx, err, "renew presence; retrying at the next heartbeat")
			return
		}
	}
	rev, created, err := a.writePresence(ctx, p)
	if err != nil {
		a.warnUnlessDone(ctx, err, "register presence; retrying at the next heartbeat")
		return
	}
	if a.pres.rev != 0 && !created {
		a.log.Warn().Msg("presence was rewritten by someone else; is another agent running with this node name?")
	}
	a.pres.rev = rev
	switch {
	case !a.pres.registered:
		a.pres.registered = true
		a.emit(EventNodeRegistered, fmt.Sprintf("agent %s started with labels {%s}", a.versionOrUnknown(), formatLabels(a.cfg.Labels)), nil)
	case created:
		a.emit(EventNodeRegistered, fmt.Sprintf("presence lease had expired (no heartbeat within %s); registered again", a.cfg.Settings.NodeLease), nil)
	}
}

// setLabels makes l the node's labels and publishes them at once, if they
// differ from the ones it has.
func (a *Agent) setLabels(ctx context.Context, l map[string]string) {
	if maps.Equal(l, a.cfg.Labels) {
		return
	}
	reason := fmt.Sprintf("labels changed from {%s} to {%s}", formatLabels(a.cfg.Labels), formatLabels(l))
	a.cfg.Labels = maps.Clone(l)
	a.log.Info().Str(logging.FieldReason, reason).Msg("node labels changed")
	a.emit(EventNodeLabelsChanged, reason, nil)
	a.heartbeat(ctx)
}

// writePresence creates the presence key, or updates it at its current revision if it exists.
func (a *Agent) writePresence(ctx context.Context, p *sluicev1.NodePresence) (rev uint64, created bool, err error) {
	for range 3 {
		cur, err := a.nodes.Get(ctx, a.cfg.Node)
		switch {
		case errors.Is(err, store.ErrNotFound):
			rev, err = a.nodes.Create(ctx, a.cfg.Node, p)
			created = true
		case errors.Is(err, store.ErrUndecodable):
			// This agent's own key: overwrite it at the revision read, or
			// the node could never register again.
			bad := err
			if rev, err = a.nodes.Update(ctx, a.cfg.Node, p, cur.Revision); err == nil {
				reason := fmt.Sprintf("%s/%s held a value that does not decode (%v); overwrote it with the node's presence", contract.BucketNodes, a.cfg.Node, bad)
				a.log.Warn().Str(logging.FieldBucket, contract.BucketNodes).Str(logging.FieldKey, a.cfg.Node).Str(logging.FieldReason, reason).Msg("overwrote unreadable presence")
				a.emit(EventUnreadablePresenceRewritten, reason, nil)
			}
		case err != nil:
			return 0, false, err
		default:
			rev, err = a.nodes.Update(ctx, a.cfg.Node, p, cur.Revision)
			created = false
		}
		if !errors.Is(err, store.ErrConflict) {
			return rev, created, err
		}
	}
	return 0, false, fmt.Errorf("write presence of %s: kept changing under the agent: %w", a.cfg.Node, store.ErrConflict)
}

func (a *Agent) versionOrUnknown() string {
	if a.cfg.Version == "" {
		return "(unknown version)"
	}
	return a.cfg.Version
}

func (a *Agent) warnUnlessDone(ctx context.Context, err error, msg string) {
	if ctx.Err() != nil {
		return
	}
	a.log.Warn().Err(err).Msg(msg)
}

// emit records one transition of this node; d names the config it concerns, if any.
func (a *Agent) emit(typ, reason string, d *sluicev1.DesiredConfig) {
	a.em.Emit(&sluicev1.Event{
		Kind:        events.KindNode,
		Id:          a.cfg.Node,
		Type:        typ,
		Reason:      reason,
		Node:        a.cfg.Node,
		Revision:    d.GetRevision(),
		Rollout:     d.GetRollout(),
		Fingerprint: d.GetFingerprint(),
	})
}

// formatLabels renders labels as k=v pairs in key order.
func formatLabels(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + l[k])
	}
	return b.String()
}
