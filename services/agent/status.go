package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	started   time.Time               // when the provision in progress started
	// restoredAtStart is why last-good was restored at start; "" = it was not.
	restoredAtStart string
}

// readStatus learns the node's status and its revision at start, so a
// restarted agent knows what it last reported.
func (a *Agent) readStatus(ctx context.Context) {
	e, err := a.statuses.Get(ctx, a.cfg.Node)
	switch {
	case errors.Is(err, store.ErrNotFound):
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
// again, twice at most.
func (a *Agent) writeStatus(ctx context.Context, st *sluicev1.NodeStatus) error {
	var err error
	for attempt := range 3 {
		var rev uint64
		rev, err = a.statuses.Update(ctx, a.cfg.Node, st, a.worker.statusRev)
		if err == nil {
			a.worker.status, a.worker.statusRev = st, rev
			return nil
		}
		if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) || attempt == 2 {
			break
		}
		cur, gerr := a.statuses.Get(ctx, a.cfg.Node)
		switch {
		case errors.Is(gerr, store.ErrNotFound):
			a.worker.statusRev = 0
		case gerr != nil:
			return fmt.Errorf("write status of %s: %w", a.cfg.Node, gerr)
		default:
			a.worker.statusRev = cur.Revision
		}
		a.log.Warn().Err(err).Uint64("kv_revision", a.worker.statusRev).Msg("status changed under the agent; writing again at its current revision")
	}
	return fmt.Errorf("write status of %s: %w", a.cfg.Node, err)
}
