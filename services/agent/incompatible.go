package agent

// A desired config this agent cannot read: written for a newer agent.

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/pkg/logging"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// EventNodeIncompatible: the agent cannot read its desired config (written
// for a newer agent); nothing was applied. The reason names the agent's
// version and the decoder's message.
const EventNodeIncompatible = "NodeIncompatible"

// rereadIncompatible is logged when a config already reported INCOMPATIBLE
// is read again.
const rereadIncompatible = "incompatible desired config read again; already reported"

// incompatible reports d, which this agent cannot read (why: the decoder's
// error), INCOMPATIBLE at once: the coordinator then knows the node needs a
// newer agent, rather than waiting for an acknowledgement that never comes
// and timing a good config out. Nothing is applied; the config in force
// stays. Reported once per operation: a resync reading it again writes
// nothing.
func (a *Agent) incompatible(ctx context.Context, d *sluicev1.DesiredConfig, why error) {
	st := a.worker.status
	if st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INCOMPATIBLE && st.GetFingerprint() == d.GetFingerprint() &&
		st.GetOperation() == d.GetOperation() && st.GetRollout() == d.GetRollout() {
		a.log.Debug().Str(logging.FieldFingerprint, d.GetFingerprint()).Msg(rereadIncompatible)
		a.ensureStatus(ctx)
		return
	}
	msg := fmt.Sprintf("agent %s cannot read its desired config (%s), written for a newer agent: %v; not applied, %s stays in force",
		a.versionOrUnknown(), describe(d), why, inForce(a.worker.applied))
	a.log.Warn().Str(logging.FieldFingerprint, d.GetFingerprint()).Str(logging.FieldRevision, d.GetRevision()).
		Str(logging.FieldReason, msg).Msg("desired config needs a newer agent")
	a.worker.started = a.cfg.Now()
	a.setPhase(ctx, d, a.worker.started, statusUpdate{
		phase:   sluicev1.NodePhase_NODE_PHASE_INCOMPATIBLE,
		message: msg,
		output:  tail(why.Error(), MaxCheckOutput),
		version: a.cfg.Version,
	}, EventNodeIncompatible, msg)
}
