package coordinator

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/storeloss"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/rollout-coordinator/internal/rollout"
)

// storeLost is the store-loss rule's answer (pkg/storeloss) for the
// decider: "" when the store is not lost. Read with every head that moved
// and at a term's load (one Get in a store that records a finished
// rollout); an error is returned, and the term reloads rather than start
// a rollout on an answer it could not read. Without the buckets (tests of
// the loop alone) the store is taken as whole.
func (lp *loop) storeLost(ctx context.Context) (string, error) {
	if lp.set == nil {
		return "", nil
	}
	loss, _, err := storeloss.Read(ctx, lp.set)
	if err != nil {
		return "", err
	}
	return loss.String(), nil
}

// storeConfirmed reports whether an operator's confirmation of a lost
// store (control/store.confirm) is stored, for a term's load: a rollout it
// resumes may have touched nodes whose config no stored value holds
// (rollout.Loaded.StoreConfirmed). One Get; a value that does not decode
// confirms nothing.
func (lp *loop) storeConfirmed(ctx context.Context) (bool, error) {
	if lp.set == nil {
		return false, nil
	}
	_, err := store.New(lp.set.Control, func() *sluicev1.StoreConfirm { return &sluicev1.StoreConfirm{} }).Get(ctx, contract.KeyStoreConfirm)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrUndecodable):
		return false, nil
	}
	return false, fmt.Errorf("read %s/%s: %w", contract.BucketControl, contract.KeyStoreConfirm, err)
}

// storeConfirmEvent turns an operator's confirmation (control/store.confirm)
// into StoreLossChanged with the rule's answer read now; nil for a deletion
// (a confirmation is never withdrawn: the next loss loses it with the store).
func (lp *loop) storeConfirmEvent(ctx context.Context, e store.Entry[*sluicev1.StoreConfirm], ok bool) (rollout.Event, error) {
	switch {
	case !ok:
		return nil, errors.New("store confirmation watcher stopped")
	case e.Err != nil || !e.Value.ProtoReflect().IsValid():
		return nil, nil
	}
	lost, err := lp.storeLost(ctx)
	if err != nil {
		return nil, err
	}
	return rollout.StoreLossChanged{Lost: lost}, nil
}
