package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Files the agent keeps in StateDir besides LastGoodFile.
const (
	// ApplyingFile is the marker of an apply in progress: the desired config
	// being applied. Found at start, it means the agent stopped mid-apply.
	ApplyingFile = "applying.json"
	// AppliedFile holds the config being checked, for SLUICE_CONFIG, when
	// the Applier names no file of its own.
	AppliedFile = "applied.json"
	// ValidatingFile holds the config given to ValidateCmd.
	ValidatingFile = "validating.json"
)

// ConfigFiler is implemented by Appliers that leave the config in force in
// a file; checks then get that path as SLUICE_CONFIG.
type ConfigFiler interface {
	ConfigPath() string
}

// emptyConfig is what a node with no last-good config goes back to; the
// coordinator reverts such a node to the same config.
func emptyConfig(node string) *sluicev1.DesiredConfig {
	nc := &sluicev1.NodeConfig{}
	return &sluicev1.DesiredConfig{Node: node, Config: nc, Fingerprint: render.Fingerprint(nc)}
}

// restoreTarget is the config a failed apply goes back to.
func (a *Agent) restoreTarget() (*sluicev1.DesiredConfig, string) {
	if a.worker.lastGood != nil {
		return a.worker.lastGood, "last-good " + short(a.worker.lastGood.GetFingerprint())
	}
	e := emptyConfig(a.cfg.Node)
	return e, "an empty config " + short(e.GetFingerprint()) + " (no last-good)"
}

// markApplying records that d is being applied, so that a crash before the
// outcome leaves a trace the next start acts on.
func (a *Agent) markApplying(d *sluicev1.DesiredConfig) {
	if a.cfg.StateDir == "" {
		return
	}
	b, err := marshalReadable(d)
	if err == nil {
		err = writeFileAtomic(filepath.Join(a.cfg.StateDir, ApplyingFile), b, 0o644)
	}
	if err != nil {
		a.log.Error().Err(err).Str(logging.FieldFingerprint, d.GetFingerprint()).
			Msg("cannot mark the apply in progress; a crash mid-apply would not be detected at start")
	}
}

// clearApplying removes the marker once the outcome is settled.
func (a *Agent) clearApplying() {
	if a.cfg.StateDir == "" {
		return
	}
	if err := os.Remove(filepath.Join(a.cfg.StateDir, ApplyingFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		a.log.Error().Err(err).Msg("remove apply marker; the next start restores last-good needlessly")
	}
}

// recoverInterrupted restores last-good if the previous run stopped
// mid-apply (the marker is on disk). It runs at start before anything else
// touches the node.
func (a *Agent) recoverInterrupted(ctx context.Context) {
	if a.cfg.StateDir == "" {
		return
	}
	path := filepath.Join(a.cfg.StateDir, ApplyingFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	interrupted := &sluicev1.DesiredConfig{}
	if err != nil || store.Unmarshal(b, interrupted) != nil {
		interrupted.Fingerprint = "unknown"
	}
	good, what := a.restoreTarget()
	if err := a.apply(ctx, good); err != nil {
		if ctx.Err() != nil {
			return
		}
		a.worker.applied = ""
		reason := fmt.Sprintf("interrupted apply of %s detected at start; RESTORING %s FAILED: %v; the node's config is unknown until the next apply",
			short(interrupted.GetFingerprint()), what, err)
		a.log.Error().Err(err).Str(logging.FieldReason, reason).Msg("restore failed")
		a.emit(EventNodeRestoreFailed, reason, interrupted)
		return
	}
	a.worker.applied = good.GetFingerprint()
	a.clearApplying()
	reason := fmt.Sprintf("interrupted apply of %s detected at start; restored %s", short(interrupted.GetFingerprint()), what)
	a.worker.restoredAtStart = reason
	a.emit(EventNodeRestored, reason, good)
}

// recordRestoreAtStart corrects the status on record after a restore at
// start changed what is in force, e.g. a node reported Invalid with its
// restore failed (applied_fingerprint unknown) whose restore has now worked.
// The phase and the desired config it names are kept: the restore is not a
// verdict on them.
func (a *Agent) recordRestoreAtStart(ctx context.Context) {
	st := a.worker.status
	if a.worker.restoredAtStart == "" || st == nil || st.GetAppliedFingerprint() == a.worker.applied {
		return
	}
	up := proto.CloneOf(st)
	up.AppliedFingerprint = a.worker.applied
	up.Message = strings.TrimPrefix(st.GetMessage()+"; "+a.worker.restoredAtStart, "; ")
	up.LastUpdate = timestamppb.New(a.cfg.Now())
	if err := a.writeStatus(ctx, up); err != nil {
		a.warnUnlessDone(ctx, err, "record the restore at start in the status; the next apply corrects it")
	}
}

// rollback handles a failed apply or check of d: it restores last-good
// through the Applier, checks it again and reports d Invalid with why.
func (a *Agent) rollback(ctx context.Context, d *sluicev1.DesiredConfig, f checkFailure) outcome {
	good, what := a.restoreTarget()
	msg := fmt.Sprintf("%s failed: %v", f.name, f.err)
	if f.name == contract.FailedCheckDeadline {
		msg = f.err.Error()
	}
	if err := a.apply(ctx, good); err != nil {
		if ctx.Err() != nil {
			return outcome{}
		}
		// The marker stays: the next start tries the restore again.
		a.worker.applied = ""
		msg += fmt.Sprintf("; RESTORING %s FAILED: %v; the node's config is unknown", what, err)
		a.log.Error().Err(err).Str(logging.FieldFingerprint, d.GetFingerprint()).Str(logging.FieldReason, msg).Msg("restore failed")
		a.emit(EventNodeRestoreFailed, fmt.Sprintf("%s of %s; %s", f.name, describe(d), msg), d)
		return a.fail(ctx, d, f, msg)
	}
	a.worker.applied = good.GetFingerprint()
	recheck := "checks pass"
	if rf := a.check(ctx, good, nil); rf != nil {
		if ctx.Err() != nil {
			return outcome{}
		}
		recheck = fmt.Sprintf("check %s still fails: %v", rf.name, rf.err)
	} else if len(a.cfg.Checks) == 0 {
		recheck = "no checks configured"
	}
	a.clearApplying()
	msg += fmt.Sprintf("; restored %s (%s)", what, recheck)
	a.emit(EventNodeRestored, fmt.Sprintf("%s of %s failed; restored %s (%s)", f.name, describe(d), what, recheck), good)
	return a.fail(ctx, d, f, msg)
}
