package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// workState is what the worker knows; only the worker touches it once Run
// has set it up.
type workState struct {
	applied   string                  // fingerprint in force on the node; "" = unknown
	lastGood  *sluicev1.DesiredConfig // the config in force, as persisted; nil = none
	status    *sluicev1.NodeStatus    // the status last written or read; nil = none or unknown
	statusRev uint64                  // its revision; 0 = the key does not exist (as far as we know)
	// lastInvalid is the agent's last Invalid report, made whether or not
	// its write was known to land (a write whose answer was lost may have
	// landed and been seen by nobody): every later status carries it.
	lastInvalid *sluicev1.InvalidReport
	started     time.Time // when the provision in progress started (Config.Now)
	startedAt   time.Time // the same, on the process's clock (its timers)
	// restoredAtStart is why last-good was restored at start; "" = it was not.
	restoredAtStart string
	// statusUnreadable is why the status key's value (at statusRev) did not
	// decode; the next write overwrites it and says so. nil = it decoded.
	statusUnreadable error
}

// readStatus learns the node's status and its revision at start, so a
// restarted agent knows what it last reported.
func (a *Agent) readStatus(ctx context.Context) {
	e, err := a.statuses.Get(ctx, a.cfg.Node)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case errors.Is(err, store.ErrUndecodable):
		// Left alone, the key could never be written again (every write is
		// compare-and-set on a revision this agent never learnt): overwrite
		// it now with what the agent knows, at the revision read.
		a.worker.statusRev, a.worker.statusUnreadable = e.Revision, err
		if werr := a.writeStatus(ctx, a.statusAtStart()); werr != nil {
			a.warnUnlessDone(ctx, werr, "overwrite the unreadable status; the next status write tries again")
		}
	case err != nil:
		// Unknown status means the next desired config is provisioned in
		// full; the write path re-reads the revision on conflict.
		a.warnUnlessDone(ctx, err, "read status at start")
	default:
		a.worker.status, a.worker.statusRev = e.Value, e.Revision
	}
}

// writeStatus stores st with compare-and-set on the revision the agent last
// wrote. The agent is the key's only writer, so a conflict means the key was
// deleted (by the reaper) or rewritten by hand: re-read the revision and try
// again. A write left unanswered within statusAttempt (or cut by a
// reconnect) is checked the same way: the value read is st → it landed and
// only its answer was lost; anything else → written again at the revision
// read. Four attempts at most.
func (a *Agent) writeStatus(ctx context.Context, st *sluicev1.NodeStatus) error {
	if l := a.labels.Load(); l != nil {
		st.NodeLabels = *l // what places the node once its presence is gone (the dashboard)
	}
	if st.LastInvalid == nil {
		st.LastInvalid = a.worker.lastInvalid // carried until the next Invalid report
	}
	if st.LastInvalid == nil {
		st.LastInvalid = a.worker.status.GetLastInvalid() // as read at start
	}
	var err error
	for attempt := range 4 {
		var rev uint64
		wctx, cancel := a.statusWriteContext(ctx, statusAttempt())
		rev, err = a.statuses.Update(wctx, a.cfg.Node, st, a.worker.statusRev)
		cancel()
		if err == nil {
			a.wroteStatus(st, rev)
			return nil
		}
		lost := store.Unanswered(ctx, err)
		if !lost && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) || attempt == 3 {
			break
		}
		cur, gerr := a.statuses.Get(ctx, a.cfg.Node)
		switch {
		case errors.Is(gerr, store.ErrNotFound):
			a.worker.statusRev = 0
		case errors.Is(gerr, store.ErrUndecodable):
			a.worker.statusRev, a.worker.statusUnreadable = cur.Revision, gerr
		case gerr != nil:
			return fmt.Errorf("write status of %s: %w", a.cfg.Node, gerr)
		case lost && proto.Equal(cur.Value, st):
			a.log.Debug().Err(err).Uint64("kv_revision", cur.Revision).Msg("status write unanswered, but it landed")
			a.wroteStatus(st, cur.Revision)
			return nil
		default:
			a.worker.statusRev = cur.Revision
		}
		if lost {
			a.log.Warn().Err(err).Uint64("kv_revision", a.worker.statusRev).Msg("status write unanswered and not stored; writing again")
		} else {
			a.log.Warn().Err(err).Uint64("kv_revision", a.worker.statusRev).Msg("status changed under the agent; writing again at its current revision")
		}
	}
	return fmt.Errorf("write status of %s: %w", a.cfg.Node, err)
}

// wroteStatus records that st is stored at rev.
func (a *Agent) wroteStatus(st *sluicev1.NodeStatus, rev uint64) {
	// The control plane answers again: retries start from the first delay.
	a.retry.Reset()
	over := a.worker.statusRev // the revision the write replaced
	a.worker.status, a.worker.statusRev = st, rev
	if a.worker.statusUnreadable != nil {
		a.reportStatusRewritten(st, over)
	}
}

// statusAttempt bounds one status write: a fifth of store.AttemptTimeout
// (1 s). A write's answer is lost when the stream's leader stops after
// taking it or the message is lost on the way to it; waiting the whole
// AttemptTimeout (5 s) for that answer held a node's acknowledgement past
// a short pickup deadline, and a healthy node was timed out and its config
// recorded invalid (chaos seed 76; seed 82 for a revert). A status write
// normally takes milliseconds.
func statusAttempt() time.Duration { return store.AttemptTimeout / 5 }

// ensureStatus checks that what the agent last reported is still stored,
// and writes it again when it is not: the reaper deletes the status of a
// node whose presence lapsed (a network partition longer than the grace),
// and a coordinator that then configures the node with the config already
// in force would otherwise wait for a report the agent believes it made.
func (a *Agent) ensureStatus(ctx context.Context) {
	if a.worker.status == nil {
		return
	}
	e, err := a.statuses.Get(ctx, a.cfg.Node)
	switch {
	case err == nil && e.Revision == a.worker.statusRev:
		return
	case err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrUndecodable):
		a.warnUnlessDone(ctx, err, "check the stored status; the next resync looks again")
		return
	}
	why := "deleted (the reaper removes the keys of a node whose presence lapsed)"
	if err == nil {
		why = fmt.Sprintf("changed by someone else (revision %d, the agent wrote %d)", e.Revision, a.worker.statusRev)
	}
	st := proto.Clone(a.worker.status).(*sluicev1.NodeStatus)
	st.LastUpdate = timestamppb.New(a.cfg.Now())
	if werr := a.writeStatus(ctx, st); werr != nil {
		a.warnUnlessDone(ctx, werr, "write the status again; the next resync tries again")
		return
	}
	a.log.Info().Str(logging.FieldReason, "the status key was "+why).Str("phase", st.GetPhase().String()).
		Msg("status written again")
}

// statusAtStart is the status the agent can state before it has handled any
// desired config: last-good in force and reported Provisioned under its own
// revision and rollout, or no phase when nothing is known to be in force.
func (a *Agent) statusAtStart() *sluicev1.NodeStatus {
	now := timestamppb.New(a.cfg.Now())
	st := &sluicev1.NodeStatus{Node: a.cfg.Node, LastUpdate: now, AppliedFingerprint: a.worker.applied}
	if lg := a.worker.lastGood; lg != nil && a.worker.applied == lg.GetFingerprint() {
		st.Phase = sluicev1.NodePhase_NODE_PHASE_PROVISIONED
		st.Revision, st.Rollout, st.Fingerprint = lg.GetRevision(), lg.GetRollout(), lg.GetFingerprint()
		st.Message = "status rewritten by the agent after it was found unreadable; last-good " + short(lg.GetFingerprint()) + " in force"
		return st
	}
	st.Message = "status rewritten by the agent after it was found unreadable; no config applied by this agent is known to be in force"
	return st
}

// reportStatusRewritten reports that the unreadable value in the status
// key, at KV revision over, was overwritten with st.
func (a *Agent) reportStatusRewritten(st *sluicev1.NodeStatus, over uint64) {
	why := a.worker.statusUnreadable
	a.worker.statusUnreadable = nil
	with := fmt.Sprintf("the agent's status (%s", st.GetPhase())
	if st.GetFingerprint() != "" {
		with += ", fingerprint " + short(st.GetFingerprint())
	}
	a.quarantine.Rewritten(contract.BucketStatus, a.cfg.Node, over, why, with+")")
}
