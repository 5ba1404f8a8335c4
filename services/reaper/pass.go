package reaper

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Pass compares the nodes that own keys with the nodes present, starts the
// absence timer of every newly absent node, clears it for every node present,
// and reaps every node absent for longer than Grace. Nothing is deleted when
// the nodes present cannot be listed.
func (r *Reaper) Pass(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, err := r.open(ctx)
	if err != nil {
		return err
	}
	presentKeys, err := h.nodes.Keys(ctx)
	if err != nil {
		return fmt.Errorf("list present nodes: %w", err)
	}
	present := make(map[string]bool, len(presentKeys))
	for _, n := range presentKeys {
		present[n] = true
	}
	owners, err := r.owners(ctx, h)
	if err != nil {
		return err
	}

	now := r.cfg.Now()
	for n := range r.absent {
		if present[n] || !owners[n] {
			delete(r.absent, n)
		}
	}
	var errs []error
	for _, n := range slices.Sorted(maps.Keys(owners)) {
		if present[n] {
			continue
		}
		since, seen := r.absent[n]
		if !seen {
			r.absent[n] = now
			r.log.Debug().Str(logging.FieldNode, n).Msg("node has keys but no presence; timing its absence")
			continue
		}
		if now.Sub(since) <= r.cfg.Grace {
			continue
		}
		if err := r.reap(ctx, h, n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// owners returns the nodes that have a status or a nodeconfigs key.
func (r *Reaper) owners(ctx context.Context, h *handles) (map[string]bool, error) {
	out := map[string]bool{}
	statusKeys, err := h.status.Keys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list node statuses: %w", err)
	}
	for _, k := range statusKeys {
		out[k] = true
	}
	configKeys, err := h.configs.Keys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list node configs: %w", err)
	}
	for _, k := range configKeys {
		if n, _, ok := contract.NodeOfConfigKey(k); ok {
			out[n] = true
		}
	}
	return out, nil
}

// nodeKey is one key reap deletes, with the revision it was read at.
type nodeKey struct {
	what string // desired, backup, status
	key  string
	rev  uint64
	del  func(ctx context.Context, key string, rev uint64) error
}

// reap deletes node's desired, backup and status keys, each at the revision
// read, after a last check that the node's presence is still absent; r.mu
// must be held. A key that changed since it was read is kept (its writer is
// alive) and the absence timer keeps running, so the next pass looks again.
func (r *Reaper) reap(ctx context.Context, h *handles, node string) error {
	keys, err := r.readKeys(ctx, h, node)
	if err != nil {
		return err
	}
	// The last look at presence, as close to the deletes as it can be.
	if _, err := h.nodes.Get(ctx, node); err == nil {
		delete(r.absent, node)
		r.log.Info().Str(logging.FieldNode, node).Msg("node came back just before reaping; keeping its keys")
		return nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("reap %s: check presence: %w", node, err)
	}

	var deleted, kept []string
	var errs []error
	for _, k := range keys {
		err := k.del(ctx, k.key, k.rev)
		switch {
		case err == nil:
			deleted = append(deleted, k.what)
		case errors.Is(err, store.ErrConflict):
			kept = append(kept, k.what+" (changed since read)")
		default:
			kept = append(kept, k.what+" (delete failed)")
			errs = append(errs, fmt.Errorf("reap %s: %w", node, err))
		}
	}
	if len(kept) == 0 {
		delete(r.absent, node)
	}
	if len(deleted) == 0 {
		if len(kept) > 0 {
			r.log.Warn().Str(logging.FieldNode, node).Strs("kept", kept).Msg("nothing reaped; trying again at the next pass")
		}
		return errors.Join(errs...)
	}
	reason := fmt.Sprintf("presence lease expired at least %s ago; deleted %s", r.cfg.Grace, strings.Join(deleted, ", "))
	if len(kept) > 0 {
		reason += "; kept " + strings.Join(kept, ", ")
	}
	h.em.Emit(&sluicev1.Event{Kind: events.KindNode, Id: node, Type: EventNodeReaped, Reason: reason, Node: node})
	return errors.Join(errs...)
}

// readKeys reads the revisions of node's keys that exist, in delete order.
func (r *Reaper) readKeys(ctx context.Context, h *handles, node string) ([]nodeKey, error) {
	var keys []nodeKey
	for _, x := range []struct{ what, key string }{
		{"desired", contract.DesiredKey(node)}, {"backup", contract.BackupKey(node)},
	} {
		e, err := h.configs.Get(ctx, x.key)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reap %s: %w", node, err)
		}
		keys = append(keys, nodeKey{what: x.what, key: x.key, rev: e.Revision, del: h.configs.Delete})
	}
	e, err := h.status.Get(ctx, node)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, fmt.Errorf("reap %s: %w", node, err)
	default:
		keys = append(keys, nodeKey{what: "status", key: node, rev: e.Revision, del: h.status.Delete})
	}
	return keys, nil
}
