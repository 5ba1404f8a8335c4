package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/pkg/contract"
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

// answerLastGood answers a request on contract.LastGoodSubject(node) with
// the last-good config as stored on the node's disk: what `sluice recover
// --from-nodes` rebuilds the intents from after the store was lost. It
// reads the file at each request (not the copy in memory), so the answer
// is what would survive a restart of the agent; without a StateDir the
// copy in memory is all there is. The agent's loop calls it (the
// subscription is a channel, as the others are: no goroutine per agent);
// it only reads, and never touches the worker's state.
func (a *Agent) answerLastGood(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	reply := nats.NewMsg(m.Reply)
	body, code, why := a.lastGoodAnswer()
	if code != 0 {
		reply.Header.Set(contract.LastGoodErrorCodeHeader, strconv.Itoa(code))
		reply.Header.Set(contract.LastGoodErrorHeader, why)
	}
	reply.Data = body
	if err := m.RespondMsg(reply); err != nil {
		a.log.Warn().Err(err).Msg("answer a request for the last-good config")
	}
}

// lastGoodAnswer is the answer to a last-good request: the config's
// protojson, or an error code (404 none, 500 unreadable) and its reason.
func (a *Agent) lastGoodAnswer() ([]byte, int, string) {
	if a.cfg.StateDir == "" {
		lg := a.inForce.Load()
		if lg == nil {
			return nil, 404, "node " + a.cfg.Node + " holds no last-good config (it has applied none; the agent keeps no state dir)"
		}
		b, err := marshalReadable(lg)
		if err != nil {
			return nil, 500, "encode the last-good config: " + err.Error()
		}
		return b, 0, ""
	}
	path := filepath.Join(a.cfg.StateDir, LastGoodFile)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, 404, "node " + a.cfg.Node + " holds no last-good config (" + path + " does not exist: it has applied none)"
	case err != nil:
		return nil, 500, "read " + path + ": " + err.Error()
	}
	if err := store.Unmarshal(b, &sluicev1.DesiredConfig{}); err != nil {
		return nil, 500, path + " does not decode: " + err.Error()
	}
	return b, 0, ""
}
