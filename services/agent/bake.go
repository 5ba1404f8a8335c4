package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Evidence-based bake (DesiredConfig.bake_checks, docs/agent.md): once a
// config that asks for it is provisioned, the worker re-runs the node's
// checks every interval and writes each pass to its status
// (NodeStatus.bake_passes), until it has the passes asked for and the bake
// time has gone by since it provisioned. Meanwhile the config is not yet
// last-good: its apply marker stays, so a failing re-run — or a restart —
// puts the previous last-good back. A failing re-run is reported Invalid
// with the check's output, as a failed apply is. A new desired config ends
// the re-runs (the config passed all it ran, so it becomes last-good first);
// the same one again (a resync) does not. While the control plane is
// paused no re-run starts, and between re-runs the worker is idle, so a
// pause is acknowledged at once.

// bakes reports whether d asks for re-runs of the checks while it bakes.
func bakes(d *sluicev1.DesiredConfig) bool { return d.GetBakeChecks().GetPasses() > 0 }

// bake re-runs d's checks while its node bakes (see above); d was just
// provisioned and its marker is still set.
func (a *Agent) bake(ctx context.Context, d *sluicev1.DesiredConfig) {
	spec := d.GetBakeChecks()
	interval := spec.GetInterval().AsDuration()
	if interval <= 0 {
		interval = contract.DefaultBakeCheckInterval
	}
	until := a.cfg.Now().Add(spec.GetFor().AsDuration())
	var passes uint32
	t := time.NewTimer(interval)
	defer t.Stop()
	// Between re-runs the worker is idle: a pause is acknowledged at once,
	// not after a bake of many minutes.
	a.setBusy("", nil)
	for passes < spec.GetPasses() || a.cfg.Now().Before(until) {
		select {
		case <-ctx.Done():
			return // the marker stays: a restart restores last-good and provisions d again
		case <-a.box.wake:
			next, ok := a.box.take()
			if !ok || sameOperation(next.cfg, d) {
				continue // a resync of d: carry on
			}
			a.box.offer(next) // the worker takes it next
			a.baked(d, fmt.Sprintf("another desired config arrived after %d passed re-run(s)", passes))
			return
		case <-t.C:
		}
		t.Reset(interval)
		if !a.claim("re-running the checks of ", d) {
			continue // paused: no node operation starts, re-runs neither
		}
		f := a.check(ctx, d, nil)
		a.setBusy("", nil)
		if f != nil {
			if ctx.Err() != nil {
				return
			}
			f.err = fmt.Errorf("re-run %d while baking: %w", passes+1, f.err)
			a.setBusy("restoring last-good after a failed re-run of ", d)
			a.rollback(ctx, d, *f)
			return
		}
		passes++
		a.setPhase(ctx, d, a.worker.started, statusUpdate{
			phase:      sluicev1.NodePhase_NODE_PHASE_PROVISIONED,
			message:    fmt.Sprintf("applied; baking: %d of %d check re-runs passed", passes, spec.GetPasses()),
			bakePasses: passes,
		}, EventNodeBakeCheckPassed, fmt.Sprintf("re-run %d of its checks passed on %s while it bakes", passes, describe(d)))
	}
	a.baked(d, fmt.Sprintf("%d re-run(s) of its checks passed over %s", passes, spec.GetFor().AsDuration()))
}

// baked makes d, provisioned and healthy through its re-runs, last-good.
func (a *Agent) baked(d *sluicev1.DesiredConfig, why string) {
	a.commit(d)
	a.clearApplying()
	a.log.Info().Str(logging.FieldFingerprint, d.GetFingerprint()).Str(logging.FieldReason, why).Msg("baked: config is last-good")
}

// sameOperation reports whether x asks for what d asked: the same config
// under the same operation, not cancelled.
func sameOperation(x, d *sluicev1.DesiredConfig) bool {
	return x.GetFingerprint() == d.GetFingerprint() && x.GetOperation() == d.GetOperation() &&
		x.GetRollout() == d.GetRollout() && !x.GetCancel()
}
