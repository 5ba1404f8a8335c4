package agent

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/logging"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// action is what the worker does with a desired config.
type action int

const (
	// actSkip: the desired config is in force and reported, or its failure is.
	actSkip action = iota
	// actReport: the config is in force and healthy but reported under
	// another revision or rollout; report it again without applying.
	actReport
	// actProvision: apply it.
	actProvision
)

func (x action) String() string {
	return [...]string{"skip", "report", "provision"}[x]
}

// plan decides what to do with desired d given the fingerprint in force and
// the status last reported. It is pure.
func plan(applied string, st *sluicev1.NodeStatus, d *sluicev1.DesiredConfig) action {
	fp := d.GetFingerprint()
	reported := st.GetFingerprint() == fp && st.GetRevision() == d.GetRevision() && st.GetRollout() == d.GetRollout()
	switch {
	case reported && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONED && applied == fp:
		return actSkip
	case reported && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_INVALID &&
		(applied != fp || st.GetOperation() != "" && st.GetOperation() == d.GetOperation()):
		// Its failure is on record; the coordinator decides what comes next.
		// Retrying the same desired config on every resync would flap. That
		// holds when last-good is this very config too (an earlier apply of
		// it succeeded but its report was lost, then a retry ran past the
		// deadline and restored it): the operation reported Invalid is
		// never run again; a revert or retry is a new operation.
		return actSkip
	case applied == fp && st.GetPhase() == sluicev1.NodePhase_NODE_PHASE_PROVISIONED && st.GetFingerprint() == fp:
		return actReport
	default:
		return actProvision
	}
}

// work applies desired configs one at a time, newest first, until ctx ends.
// While the control plane is paused it leaves what arrives in the mailbox
// until resume (pause.go).
func (a *Agent) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.box.wake:
		case <-a.pz.wake:
		}
		d, ok := a.next()
		if !ok {
			continue
		}
		if d.unreadable != nil {
			a.incompatible(ctx, d.cfg, d.unreadable)
		} else {
			a.handle(ctx, d.cfg)
		}
		a.setBusy("", nil)
	}
}

// next takes the newest desired config from the mailbox and claims the
// worker for it (claim), unless the pause holds it: then it stays in the
// mailbox, for the resume to wake the worker to it.
func (a *Agent) next() (desired, bool) {
	d, ok := a.box.take()
	if !ok {
		a.setBusy("", nil)
		return desired{}, false
	}
	if !a.claim("applying ", d.cfg) {
		a.box.putBack(d)
		return desired{}, false
	}
	return d, true
}

func (a *Agent) handle(ctx context.Context, d *sluicev1.DesiredConfig) {
	if d.GetCancel() && plan(a.worker.applied, a.worker.status, d) == actProvision {
		// Given up by the coordinator before this agent started it (or
		// while a restart held it): never start it, and say so, so that the
		// status is about it and not a stale Provisioning of an earlier run.
		a.worker.started = a.cfg.Now()
		err := fmt.Errorf("operation %s was cancelled by the coordinator at its deadline before this agent started it", cmp.Or(d.GetOperation(), "(unnamed)"))
		a.fail(ctx, d, checkFailure{name: contract.FailedCheckDeadline, output: err.Error(), err: err},
			err.Error()+"; not applied, "+inForce(a.worker.applied)+" stays in force")
		return
	}
	switch act := plan(a.worker.applied, a.worker.status, d); act {
	case actSkip:
		a.log.Debug().Str(logging.FieldFingerprint, d.GetFingerprint()).Str(logging.FieldRevision, d.GetRevision()).
			Str("phase", a.worker.status.GetPhase().String()).Msg("desired config already handled and reported")
		a.ensureStatus(ctx)
	case actReport:
		a.report(ctx, d)
	case actProvision:
		if o := a.provision(ctx, d); o.phase == sluicev1.NodePhase_NODE_PHASE_PROVISIONED && bakes(d) {
			a.bake(ctx, d)
		}
	}
}

// outcome is how a provision ended.
type outcome struct {
	phase       sluicev1.NodePhase // UNSPECIFIED: not finished (shutdown, or status unwritable)
	failedCheck string
	output      string
}

// provision takes d to Provisioned or Invalid: mark the apply in
// progress, validate, apply, check; on failure restore last-good
// (rollback). An operation still running after ProgressInterval is
// acknowledged (Provisioning) then (operation.go); a shorter one is
// acknowledged by its outcome alone.
func (a *Agent) provision(ctx context.Context, d *sluicev1.DesiredConfig) outcome {
	started := a.cfg.Now()
	a.worker.started, a.worker.startedAt = started, time.Now()
	// The operation's deadline bounds validate, apply and checks; restoring
	// last-good after it passed is not bounded by it (ctx, not op).
	op, stop := a.operation(ctx, d)
	defer stop()
	// The stop of op (its deadline, or the coordinator's cancel) makes the
	// step in progress fail; past() tells that from a genuine failure.
	a.markApplying(d)
	done := a.progressDuring(ctx, d, "validating")
	f := a.validate(op, d)
	done()
	if f != nil {
		if ctx.Err() != nil {
			return outcome{}
		}
		a.clearApplying() // nothing was applied
		if past(op, ctx) {
			df := deadlineFailure(op, d, "validating", *f)
			return a.fail(ctx, d, df, df.err.Error()+"; not applied")
		}
		if f.nodeFault != "" {
			return a.fail(ctx, d, *f, fmt.Sprintf("validate failed: %v; not applied: the node cannot apply any config now, which is not the config's fault", f.err))
		}
		return a.fail(ctx, d, *f, fmt.Sprintf("validate failed: %v; not applied", f.err))
	}
	done = a.progressDuring(ctx, d, "applying")
	err := a.apply(op, d)
	done()
	if err != nil {
		if ctx.Err() != nil {
			// The marker stays: the next start restores last-good first.
			a.log.Info().Str(logging.FieldFingerprint, d.GetFingerprint()).Msg("shutting down mid-apply; a restart restores last-good and provisions again")
			return outcome{}
		}
		f := checkFailure{name: "apply", output: err.Error(), err: err}
		if past(op, ctx) {
			f = deadlineFailure(op, d, "applying", f)
		}
		return a.rollback(ctx, d, f)
	}
	a.worker.applied = d.GetFingerprint()
	if f := a.check(op, d, func(step string) func() { return a.progressDuring(ctx, d, step) }); f != nil {
		if ctx.Err() != nil {
			return outcome{}
		}
		if past(op, ctx) {
			*f = deadlineFailure(op, d, "checking ("+f.name+")", *f)
		}
		return a.rollback(ctx, d, *f)
	}
	if !bakes(d) {
		a.commit(d)
		a.clearApplying()
	} // else it becomes last-good once it baked (bake.go)
	return a.succeed(ctx, d, started)
}

// commit records d as the config in force and persists it as last-good. A
// failure to persist is logged, not reported as Invalid: the config is in
// force and healthy, and the fault is the node's disk, not the config.
func (a *Agent) commit(d *sluicev1.DesiredConfig) {
	a.worker.applied, a.worker.lastGood = d.GetFingerprint(), d
	a.inForce.Store(d)
	if err := a.saveLastGood(d); err != nil {
		a.log.Error().Err(err).Str(logging.FieldFingerprint, d.GetFingerprint()).
			Msg("config applied but last-good could not be saved; the node cannot restore it after a restart")
	}
}

func (a *Agent) succeed(ctx context.Context, d *sluicev1.DesiredConfig, started time.Time) outcome {
	a.setPhase(ctx, d, started, statusUpdate{
		phase:   sluicev1.NodePhase_NODE_PHASE_PROVISIONED,
		message: "applied",
	}, EventNodeProvisioned, fmt.Sprintf("applied %s in %s", describe(d), took(a.cfg.Now().Sub(started))))
	return outcome{phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED}
}

// took says how long d lasted for a message: "under 1ms" rather than "0s",
// and no negative time when an injected clock went back.
func took(d time.Duration) string {
	switch {
	case d < 0:
		return "an unknown time (the clock went back)"
	case d < time.Millisecond:
		return "under 1ms"
	}
	return d.Round(time.Millisecond).String()
}

// fail reports d Invalid because of f; msg says what happened and what is
// in force now.
func (a *Agent) fail(ctx context.Context, d *sluicev1.DesiredConfig, f checkFailure, msg string) outcome {
	output := f.output
	if output == "" && f.err != nil {
		output = f.err.Error()
	}
	output = tail(output, MaxCheckOutput)
	a.setPhase(ctx, d, a.worker.started, statusUpdate{
		phase:       sluicev1.NodePhase_NODE_PHASE_INVALID,
		message:     msg,
		failedCheck: f.name,
		output:      output,
		nodeFault:   f.nodeFault,
	}, EventNodeInvalid, fmt.Sprintf("%s of %s: %s", f.name, describe(d), msg))
	return outcome{phase: sluicev1.NodePhase_NODE_PHASE_INVALID, failedCheck: f.name, output: output}
}

// report states that d, already in force and healthy, is provisioned under
// its own revision and rollout, without applying it again.
func (a *Agent) report(ctx context.Context, d *sluicev1.DesiredConfig) {
	a.setPhase(ctx, d, a.cfg.Now(), statusUpdate{
		phase:   sluicev1.NodePhase_NODE_PHASE_PROVISIONED,
		message: "already in force",
	}, EventNodeProvisioned, fmt.Sprintf("%s already in force; not applied again", describe(d)))
}

// statusUpdate is the part of a status that differs between phases.
type statusUpdate struct {
	phase                        sluicev1.NodePhase
	message, failedCheck, output string
	bakePasses                   uint32 // re-runs passed while baking (bake.go)
	progress                     string // the step in progress (operation.go)
	version                      string // the agent's version, with INCOMPATIBLE (incompatible.go)
	nodeFault                    string // with INVALID: the node could not apply it (checkFailure.nodeFault)
}

// setPhase writes the status of d and, once stored, emits the transition.
// It reports whether the status was written; when it was not, the next
// resync provisions d again.
func (a *Agent) setPhase(ctx context.Context, d *sluicev1.DesiredConfig, started time.Time, u statusUpdate, event, reason string) bool {
	if err := a.writePhase(ctx, d, started, u); err != nil {
		a.warnUnlessDone(ctx, err, "write status "+u.phase.String()+"; provisioning again shortly")
		a.resyncSoon(ctx)
		return false
	}
	a.emit(event, reason, d)
	return true
}

// writePhase writes the status of d in phase u.
func (a *Agent) writePhase(ctx context.Context, d *sluicev1.DesiredConfig, started time.Time, u statusUpdate) error {
	st := &sluicev1.NodeStatus{
		Node:               a.cfg.Node,
		Phase:              u.phase,
		Revision:           d.GetRevision(),
		Rollout:            d.GetRollout(),
		Fingerprint:        d.GetFingerprint(),
		ApplyStartedAt:     timestamppb.New(started),
		LastUpdate:         timestamppb.New(a.cfg.Now()),
		Message:            u.message,
		FailedCheck:        u.failedCheck,
		CheckOutput:        u.output,
		AppliedFingerprint: a.worker.applied,
		Operation:          d.GetOperation(),
		BakePasses:         u.bakePasses,
		Progress:           u.progress,
		AgentVersion:       u.version,
		NodeFault:          u.nodeFault,
	}
	if u.phase == sluicev1.NodePhase_NODE_PHASE_INVALID {
		st.LastInvalid = &sluicev1.InvalidReport{Fingerprint: d.GetFingerprint(), Rollout: d.GetRollout(), Revision: d.GetRevision(),
			Check: u.failedCheck, Output: u.output, At: st.LastUpdate, Revert: d.GetRevert(), NodeFault: u.nodeFault}
		a.worker.lastInvalid = st.LastInvalid
	}
	return a.writeStatus(ctx, st)
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

// describe names a desired config for operators.
func describe(d *sluicev1.DesiredConfig) string {
	// Concatenated, not formatted: every status and event of a node's change
	// names its config (make bench's profile).
	return "fingerprint " + short(d.GetFingerprint()) + " from revision " + d.GetRevision() + " (rollout " + d.GetRollout() + ")"
}

func short(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
}

// inForce names the fingerprint in force for a message.
func inForce(fp string) string {
	if fp == "" {
		return "the config in force (unknown)"
	}
	return "fingerprint " + short(fp)
}
