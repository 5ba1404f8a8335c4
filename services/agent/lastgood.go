package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// LastGoodFile is the name of the last-good config in StateDir.
const LastGoodFile = "last-good.json"

// loadLastGood reads StateDir/last-good.json, the config in force when the
// agent last ran, creating StateDir if needed. A file that does not decode is
// set aside and treated as absent: the next desired config is then applied in
// full, which is safe.
func (a *Agent) loadLastGood() error {
	if a.cfg.StateDir == "" {
		return nil
	}
	if err := os.MkdirAll(a.cfg.StateDir, 0o755); err != nil {
		return fmt.Errorf("agent %s: state dir: %w", a.cfg.Node, err)
	}
	path := filepath.Join(a.cfg.StateDir, LastGoodFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agent %s: read last-good: %w", a.cfg.Node, err)
	}
	cfg := &sluicev1.DesiredConfig{}
	if err := store.Unmarshal(b, cfg); err != nil {
		a.log.Error().Err(err).Str("path", path).Msg("last-good does not decode; ignoring it and provisioning the next desired config in full")
		return nil
	}
	a.worker.applied, a.worker.lastGood = cfg.GetFingerprint(), cfg
	a.inForce.Store(cfg)
	a.log.Info().Str(logging.FieldFingerprint, cfg.GetFingerprint()).Str(logging.FieldRevision, cfg.GetRevision()).
		Msg("loaded last-good config")
	return nil
}

// saveLastGood persists cfg as StateDir/last-good.json.
func (a *Agent) saveLastGood(cfg *sluicev1.DesiredConfig) error {
	if a.cfg.StateDir == "" {
		return nil
	}
	b, err := marshalReadable(cfg)
	if err != nil {
		return fmt.Errorf("encode last-good: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(a.cfg.StateDir, LastGoodFile), b, 0o644); err != nil {
		return fmt.Errorf("save last-good: %w", err)
	}
	return nil
}
