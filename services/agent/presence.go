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
	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
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
	gone       bool             // the node left outside sluice (Departures): no beats
	back       string           // why it registers again after it was gone
}

// Departure says that the node left the fleet outside sluice (Gone), or
// is back; Reason says why, in the event and the log ("its Kubernetes
// Node was deleted").
type Departure struct {
	Gone   bool
	Reason string
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
	if a.pres.gone {
		return true // withdrawn: nothing to renew (depart)
	}
	p := &sluicev1.NodePresence{
		Node:           a.cfg.Node,
		Labels:         a.cfg.Labels,
		AgentVersion:   a.cfg.Version,
		ConfigFeatures: a.cfg.Features,
		StartedAt:      timestamppb.New(a.pres.started),
		HeartbeatAt:    timestamppb.New(a.cfg.Now()),
		Pause:          a.currentAck(),
	}
	// What the node runs, from its last-good on disk: the one statement of
	// it that survives a lost store (docs/agent.md, "What a node runs").
	if lg := a.inForce.Load(); lg != nil {
		p.InForceRevision, p.InForceFingerprint, p.InForceRollout = lg.GetRevision(), lg.GetFingerprint(), lg.GetRollout()
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
	case created && a.pres.back != "":
		a.emit(EventNodeRegistered, a.pres.back+"; registered again", nil)
		a.pres.back = ""
	case created:
		a.emit(EventNodeRegistered, fmt.Sprintf("presence lease had expired (no heartbeat within %s); registered again", a.cfg.Settings.NodeLease), nil)
		// Perhaps because the lease was shortened since the agent read it.
		if lease, err := buckets.NodeLease(ctx, a.js); err == nil {
			a.adoptLease(lease)
		}
	}
	return true
}

// beatAttempt bounds one heartbeat: a sixth of the interval, at least
// statusAttempt (1 s) and at most store.AttemptTimeout (5 s), and never
// more than the interval. At the default lease (3 minutes, a beat a
// minute) that is 5 s: JetStream answering a few seconds late does not fail
// a beat — a failed beat is retried, and retries are what feed an overload
// — while a beat whose answer is lost holds the loop (desired configs wait
// in its channel meanwhile) for seconds, not for the whole request timeout.
func (a *Agent) beatAttempt() time.Duration {
	interval := a.cfg.Settings.HeartbeatInterval()
	return min(interval, max(statusAttempt(), min(interval/6, store.AttemptTimeout)))
}

// beatAfter is when the next heartbeat is due: the interval (±10%) after
// one that was written; after one that failed, a sixth of the interval (at
// least retryDelay), doubling while beats keep failing up to the interval
// itself, jittered. The lease is three beats, so after a failed beat two
// intervals remain: at the default lease that is 120 s for tries at about
// 10, 30 and 70 s. A fleet whose beats fail together (JetStream down) does
// not come back together, and a failing agent offers at most about twice a
// healthy one's beats at first and the same once the backoff reaches the
// interval — never the once-a-second retries that, with 100,000 agents,
// kept JetStream saturated (issue 20).
func (a *Agent) beatAfter(ok bool) time.Duration {
	interval := a.cfg.Settings.HeartbeatInterval()
	if a.pres.retry == nil {
		a.pres.retry = backoff.New(backoff.Policy{Base: min(max(retryDelay, interval/6), interval), Cap: interval})
	}
	if ok {
		a.pres.retry.Reset()
		// ±10%: a fleet started together (a DaemonSet rollout, a power
		// cycle) does not beat in step; the mean rate stays one a beat.
		return backoff.Spread(interval, 0.1, nil)
	}
	return a.pres.retry.Next()
}

// adoptLease makes lease the node lease the agent beats for: the nodes
// bucket's TTL, which the rollout-coordinator's --node-lease sets (one home
// for it; agents have no flag of their own). Zero (not known) changes
// nothing.
func (a *Agent) adoptLease(lease time.Duration) {
	if lease <= 0 || lease == a.cfg.Settings.NodeLease {
		return
	}
	a.log.Info().Dur("node_lease", lease).Dur("was", a.cfg.Settings.NodeLease).
		Msgf("the node lease in force is %s (the nodes bucket's TTL): a heartbeat every %s", lease, lease/3)
	a.cfg.Settings.NodeLease = lease
	a.pres.retry = nil // its policy follows the interval
}

// setLabels makes l the node's labels and publishes them at once, if they
// differ from the ones it has.
func (a *Agent) setLabels(ctx context.Context, l map[string]string) {
	if maps.Equal(l, a.cfg.Labels) {
		return
	}
	if errs := contract.CheckLabels("the node", l, contract.MaxNodeLabels); len(errs) > 0 {
		// Publishing them would have the presence quarantined by every
		// reader (pkg/contract/wellformed): keep the labels in force. A
		// set is sent once per change, so this logs once per refused set.
		a.log.Error().Str(logging.FieldReason, errors.Join(errs...).Error()).
			Msg("node labels refused: they break sluice's label rules; the node keeps its previous labels until they are fixed")
		return
	}
	reason := fmt.Sprintf("labels changed from {%s} to {%s}", formatLabels(a.cfg.Labels), formatLabels(l))
	l = maps.Clone(l)
	a.cfg.Labels = l
	a.labels.Store(&l) // the next status carries them; none is written for this alone
	a.log.Info().Str(logging.FieldReason, reason).Msg("node labels changed")
	a.emit(EventNodeLabelsChanged, reason, nil)
	a.heartbeat(ctx)
}

// depart takes a Departure. Gone: the presence is withdrawn (deleted at
// the revision this agent wrote; one another writer replaced is left to
// lapse) and no beat is written until the node is back, when it
// registers again at once.
func (a *Agent) depart(ctx context.Context, d Departure) {
	if d.Gone == a.pres.gone {
		return
	}
	a.pres.gone = d.Gone
	if !d.Gone {
		a.log.Info().Str(logging.FieldReason, d.Reason).Msg("node is back: registering again")
		a.pres.back = d.Reason
		a.heartbeat(ctx)
		return
	}
	reason := d.Reason + ": presence withdrawn; the node has left until it is back"
	a.log.Warn().Str(logging.FieldReason, reason).Msg("node left")
	a.emit(EventNodeLeft, reason, nil)
	rev := a.pres.rev
	a.pres.rev = 0
	if rev == 0 {
		return // never written: nothing to withdraw
	}
	dctx, cancel := context.WithTimeout(ctx, a.beatAttempt())
	defer cancel()
	switch err := a.nodes.Delete(dctx, a.cfg.Node, rev); {
	case err == nil, errors.Is(err, store.ErrNotFound):
	case errors.Is(err, store.ErrConflict):
		a.log.Warn().Msg("presence was rewritten by someone else; not withdrawn (it lapses within the node lease unless renewed): is another agent running with this node name?")
	default:
		a.warnUnlessDone(ctx, err, "withdraw presence; it lapses within the node lease")
	}
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
