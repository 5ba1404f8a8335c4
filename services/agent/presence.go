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

	"github.com/sluicehq/sluice/pkg/backoff"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// presence is the agent's heartbeat lease in the nodes bucket.
type presence struct {
	started    time.Time
	rev        uint64           // revision this agent last wrote; 0 = none yet
	registered bool             // written at least once since Run started
	retry      *backoff.Backoff // the delays after failed beats (beatAfter)
}

// heartbeat writes the node's presence: an Update on the revision last
// written, or, when that fails because the key moved or expired, a re-read
// and Create or Update. It is bounded by beatAttempt: a beat is a small
// write, and one whose answer is lost (the stream's leader stopped after
// taking it) must not hold the agent's loop — which receives desired
// configs — for the whole request timeout. A failure is logged, and
// heartbeat reports it so the next beat comes soon (beatAfter); the lease
// is three beats long.
func (a *Agent) heartbeat(ctx context.Context) (ok bool) {
	p := &sluicev1.NodePresence{
		Node:         a.cfg.Node,
		Labels:       a.cfg.Labels,
		AgentVersion: a.cfg.Version,
		StartedAt:    timestamppb.New(a.pres.started),
		HeartbeatAt:  timestamppb.New(a.cfg.Now()),
		Pause:        a.currentAck(),
	}
	bctx, cancel := context.WithTimeout(ctx, a.beatAttempt())
	defer cancel()
	if a.pres.rev != 0 {
		rev, err := a.nodes.Update(bctx, a.cfg.Node, p, a.pres.rev)
		if err == nil {
			a.pres.rev = rev
			return true
		}
		if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
			a.warnUnlessDone(ctx, err, "renew presence; retrying shortly")
			return false
		}
	}
	rev, created, foreign, err := a.writePresence(bctx, p)
	if err != nil {
		a.warnUnlessDone(ctx, err, "register presence; retrying shortly")
		return false
	}
	if foreign {
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
	return true
}

// beatAttempt bounds one heartbeat: statusAttempt (1 s), or the heartbeat
// interval if shorter.
func (a *Agent) beatAttempt() time.Duration {
	return min(statusAttempt(), a.cfg.Settings.HeartbeatInterval())
}

// beatAfter is when the next heartbeat is due: the interval (±10%) after
// one that was written; after one that failed, retryDelay (or the interval if
// shorter), growing to twice that while beats keep failing, jittered: a
// fleet whose beats fail together (JetStream slower than beatAttempt) does
// not come back together.
//
// Why the cap is 2 s and not the interval: the lease is only three beats,
// so after a failed beat two intervals remain; backing off to the interval
// left about four attempts in them, and under the bench's 30,000 agents on
// two cores most presences expired (5,784 of 30,000 nodes configured, and
// 19,061 in a second run; with the cap at 2 s all 30,000, overhead ratio
// 3.96). Once the lease is many beats long (issue 20's heartbeat budget),
// the cap can grow to the interval, so a failing agent never offers more
// than a healthy one.
func (a *Agent) beatAfter(ok bool) time.Duration {
	interval := a.cfg.Settings.HeartbeatInterval()
	if a.pres.retry == nil {
		// 1 s to 2 s (at most the interval): a try every 2-3 s while the 3-beat lease runs out, never in lockstep.
		a.pres.retry = backoff.New(backoff.Policy{Base: min(retryDelay, interval), Cap: min(2*retryDelay, interval)})
	}
	if ok {
		a.pres.retry.Reset()
		// ±10%: a fleet started together (a DaemonSet rollout, a power
		// cycle) does not beat in step; the mean rate stays one a beat.
		return backoff.Spread(interval, 0.1, nil)
	}
	return a.pres.retry.Next()
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

// writePresence creates the presence key, or updates it at its current
// revision if it exists; foreign says the value it replaced was not this
// agent's (another start time: another agent with this node name, or a
// hand edit), not one of its own beats whose answer was lost.
func (a *Agent) writePresence(ctx context.Context, p *sluicev1.NodePresence) (rev uint64, created, foreign bool, err error) {
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
				a.quarantine.Rewritten(contract.BucketNodes, a.cfg.Node, cur.Revision, bad, "the node's presence")
			}
		case err != nil:
			return 0, false, false, err
		default:
			rev, err = a.nodes.Update(ctx, a.cfg.Node, p, cur.Revision)
			created = false
			foreign = a.pres.rev != 0 && !cur.Value.GetStartedAt().AsTime().Equal(p.GetStartedAt().AsTime())
		}
		if !errors.Is(err, store.ErrConflict) {
			return rev, created, foreign, err
		}
	}
	return 0, false, false, fmt.Errorf("write presence of %s: kept changing under the agent: %w", a.cfg.Node, store.ErrConflict)
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
