package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The steps of an operation — validate, apply, check — each bounded by
// the agent's own limit (Config: ApplierTimeout, ValidateTimeout,
// CheckDeadline) within the operation's deadline, which provision passes
// in as ctx (operation.go). A restore of last-good runs apply and check
// too, bounded by the same limits but not by the operation's deadline.

// validate has the Applier (if it is a Validator, bounded by
// ApplierTimeout), then ValidateCmd (bounded by ValidateTimeout), check d
// before it is applied.
func (a *Agent) validate(ctx context.Context, d *sluicev1.DesiredConfig) *checkFailure {
	if v, ok := a.cfg.Applier.(Validator); ok {
		vctx, cancel := context.WithTimeout(ctx, a.cfg.ApplierTimeout)
		err := v.Validate(vctx, d)
		cancel()
		if err != nil {
			f := &checkFailure{name: "validate", output: tail(err.Error(), MaxCheckOutput), err: err}
			if errors.Is(err, ErrNodeFault) {
				f.nodeFault = tail(err.Error(), maxNodeFault)
			}
			return f
		}
	}
	if a.cfg.ValidateCmd == "" {
		return nil
	}
	f := &checkFailure{name: "validate"}
	path, cleanup, err := a.configFile(d, ValidatingFile)
	if err != nil {
		f.output, f.err = err.Error(), err
		return f
	}
	defer cleanup()
	vctx, cancel := context.WithTimeout(ctx, a.cfg.ValidateTimeout)
	defer cancel()
	env := CheckEnv{Node: a.cfg.Node, ConfigPath: path, Fingerprint: d.GetFingerprint()}
	out, err := runShell(vctx, a.cfg.ValidateCmd, env.environ(), nil)
	if err == nil {
		return nil
	}
	f.output, f.err = tail(out, MaxCheckOutput), err
	return f
}

// apply has the Applier put d in force, bounded by ApplierTimeout.
func (a *Agent) apply(ctx context.Context, d *sluicev1.DesiredConfig) error {
	actx, cancel := context.WithTimeout(ctx, a.cfg.ApplierTimeout)
	defer cancel()
	start := time.Now()
	err := a.cfg.Applier.Apply(actx, d)
	a.cfg.Metrics.applied(time.Since(start), err)
	if err != nil && errors.Is(actx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		return fmt.Errorf("did not finish within %s: %w", a.cfg.ApplierTimeout, err)
	}
	return err
}

// check runs the configured checks against cfg, in force on the node,
// all within CheckDeadline; each, if set, follows them (see runChecks).
func (a *Agent) check(ctx context.Context, cfg *sluicev1.DesiredConfig, each func(string) func()) *checkFailure {
	if len(a.cfg.Checks) == 0 {
		return nil
	}
	env := CheckEnv{Node: a.cfg.Node, Fingerprint: cfg.GetFingerprint(), Config: cfg}
	if cf, ok := a.cfg.Applier.(ConfigFiler); ok && cf.ConfigPath() != "" {
		env.ConfigPath = cf.ConfigPath()
	} else {
		path, cleanup, err := a.configFile(cfg, AppliedFile)
		if err != nil {
			return &checkFailure{name: "checks", output: err.Error(), err: err}
		}
		defer cleanup()
		env.ConfigPath = path
	}
	return runChecks(ctx, a.cfg.Metrics.timed(a.cfg.Checks), a.cfg.CheckDeadline, a.cfg.CheckPause, env, each)
}

// configFile writes cfg for a command to read: to StateDir/name (kept, for
// whoever looks later), or to a temporary file without a StateDir.
func (a *Agent) configFile(cfg *sluicev1.DesiredConfig, name string) (string, func(), error) {
	b, err := marshalReadable(cfg)
	if err != nil {
		return "", nil, fmt.Errorf("encode config: %w", err)
	}
	path := ""
	if a.cfg.StateDir != "" {
		path = filepath.Join(a.cfg.StateDir, name)
	}
	return writeConfigFile(path, b)
}
