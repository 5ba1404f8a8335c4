package reaper

import (
	"context"
	"errors"
	"fmt"
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
// and reaps every node absent for longer than Grace whose keys the active
// rollout does not reference. Nothing is deleted when the nodes present or
// the active rollout cannot be read.
func (r *Reaper) Pass(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, err := r.open(ctx)
	if err != nil {
		return err
	}
	if hold, err := r.holdForLoss(ctx, h); hold || err != nil {
		return err
	}
	f, err := r.fleetFor(ctx, h)
	if err != nil {
		return err
	}

	now := r.cfg.Now()
	for n := range r.absent {
		if f.present[n] || !f.owns(n) {
			delete(r.absent, n)
		}
	}
	for n := range r.held {
		if f.present[n] || !f.owns(n) {
			delete(r.held, n)
		}
	}
	var due []string
	for _, n := range f.absentOwners() {
		since, seen := r.absent[n]
		if !seen {
			r.absent[n] = now
			r.log.Debug().Str(logging.FieldNode, n).Msg("node has keys but no presence; timing its absence")
			continue
		}
		if now.Sub(since) > r.cfg.Grace {
			due = append(due, n)
		}
	}
	due, err = r.guard(ctx, h, due, f)
	if err != nil {
		return err
	}
	if len(due) == 0 {
		return nil
	}
	act, err := r.activeRollout(ctx, h)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range due {
		if err := r.reap(ctx, h, n, act); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// active is what the reaper knows of rollouts/active.
type active struct {
	rollout    string // the active rollout's id; "" = none
	unreadable bool   // the key does not decode: which rollout is active is unknown
}

// activeRollout reads rollouts/active. A value that does not decode is
// reported and returned as unknown, which postpones every reap that could
// concern it; any other failure ends the pass with nothing deleted.
func (r *Reaper) activeRollout(ctx context.Context, h *handles) (active, error) {
	e, err := h.rollouts.Get(ctx, contract.KeyActive)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return active{}, nil
	case errors.Is(err, store.ErrUndecodable):
		h.quarantine.Report(contract.BucketRollouts, contract.KeyActive, e.Revision, err,
			"no node with a desired config is reaped until it is readable")
		return active{unreadable: true}, nil
	case err != nil:
		return active{}, fmt.Errorf("read the active rollout: %w", err)
	}
	return active{rollout: e.Value.GetRollout()}, nil
}

// nodeKey is one key reap deletes, with the revision it was read at.
type nodeKey struct {
	what   string // desired, backup, status
	bucket string
	key    string
	rev    uint64
	err    error // the value does not decode
	del    func(ctx context.Context, key string, rev uint64) error
}

// reap deletes node's desired, backup and status keys, each at the revision
// read, after a last check that the node's presence is still absent; r.mu
// must be held. It deletes nothing while the active rollout references the
// node's desired config (a revert included: the node needs its backup when
// it comes back), while the active rollout cannot be read, or while one of
// the node's keys does not decode; each such wait is reported once. A key
// that changed since it was read is kept (its writer is alive) and the
// absence timer keeps running, so the next pass looks again.
func (r *Reaper) reap(ctx context.Context, h *handles, node string, act active) error {
	keys, desired, err := r.readKeys(ctx, h, node)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if k.err != nil {
			h.quarantine.Report(k.bucket, k.key, k.rev, k.err, "the node's keys are kept until it is readable or removed by hand")
			return nil
		}
	}
	switch {
	case desired == nil:
		// No desired config: nothing a rollout could reference.
	case act.unreadable:
		r.postpone(h, node, fmt.Sprintf("%s/%s does not decode, so whether the active rollout references this node is unknown",
			contract.BucketRollouts, contract.KeyActive))
		return nil
	case act.rollout != "" && desired.GetRollout() == act.rollout:
		what := "its desired config"
		if desired.GetRevert() {
			what = "its revert to the backup"
		}
		r.postpone(h, node, fmt.Sprintf("%s belongs to the active rollout %s; its keys are kept until the rollout ends", what, act.rollout))
		return nil
	}
	// The last look at presence, as close to the deletes as it can be.
	switch _, err := h.nodes.Get(ctx, node); {
	case err == nil, errors.Is(err, store.ErrUndecodable): // a presence that does not decode is still a presence
		delete(r.absent, node)
		delete(r.held, node)
		r.log.Info().Str(logging.FieldNode, node).Msg("node came back just before reaping; keeping its keys")
		return nil
	case !errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("reap %s: check presence: %w", node, err)
	}
	return r.deleteKeys(ctx, h, node, keys)
}

// deleteKeys deletes keys, each at the revision read, and reports what it
// deleted and kept; r.mu must be held.
func (r *Reaper) deleteKeys(ctx context.Context, h *handles, node string, keys []nodeKey) error {
	var deleted, kept []string
	var errs []error
	for _, k := range keys {
		err := k.del(ctx, k.key, k.rev)
		switch {
		case err == nil:
			deleted = append(deleted, k.what)
		case errors.Is(err, store.ErrConflict):
			// Someone wrote the key since it was read (on a cluster a lost
			// race is error 10164, mapped to ErrConflict too): not a failure,
			// the next pass looks again.
			kept = append(kept, k.what+" (changed since read)")
		default:
			kept = append(kept, k.what+" (delete failed)")
			errs = append(errs, fmt.Errorf("reap %s: %w", node, err))
		}
	}
	delete(r.held, node)
	if len(kept) == 0 {
		delete(r.absent, node)
	}
	if len(deleted) == 0 {
		if len(kept) > 0 {
			r.log.Info().Str(logging.FieldNode, node).Strs("kept", kept).Msg("nothing reaped; looking again at the next pass")
		}
		return errors.Join(errs...)
	}
	reason := fmt.Sprintf("presence lease expired at least %s ago; deleted %s", r.cfg.Grace, strings.Join(deleted, ", "))
	if len(kept) > 0 {
		reason += "; kept " + strings.Join(kept, ", ")
	}
	h.em.Emit(&sluicev1.Event{Kind: events.KindNode, Id: node, Type: EventNodeReaped, Reason: reason, Node: node})
	r.deletedSome(KindNodes, 1)
	return errors.Join(errs...)
}

// readKeys reads the revisions of node's keys that exist, in delete order,
// and the node's desired config (nil when it has none or it does not decode).
// A value that does not decode is returned with err set.
func (r *Reaper) readKeys(ctx context.Context, h *handles, node string) ([]nodeKey, *sluicev1.DesiredConfig, error) {
	var keys []nodeKey
	var desired *sluicev1.DesiredConfig
	for _, x := range []struct{ what, key string }{
		{"desired", contract.DesiredKey(node)}, {"backup", contract.BackupKey(node)},
	} {
		e, err := h.configs.Get(ctx, x.key)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil && !errors.Is(err, store.ErrUndecodable) {
			return nil, nil, fmt.Errorf("reap %s: %w", node, err)
		}
		if err == nil && x.what == "desired" {
			desired = e.Value
		}
		keys = append(keys, nodeKey{what: x.what, bucket: contract.BucketNodeConfigs, key: x.key, rev: e.Revision, err: err, del: h.configs.Delete})
	}
	e, err := h.status.Get(ctx, node)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil && !errors.Is(err, store.ErrUndecodable):
		return nil, nil, fmt.Errorf("reap %s: %w", node, err)
	default:
		keys = append(keys, nodeKey{what: "status", bucket: contract.BucketStatus, key: node, rev: e.Revision, err: err, del: h.status.Delete})
	}
	return keys, desired, nil
}

// postpone reports, once per node and reason, that node's keys are kept.
func (r *Reaper) postpone(h *handles, node, why string) {
	if r.held[node] == why {
		return
	}
	r.held[node] = why
	r.log.Info().Str(logging.FieldNode, node).Str(logging.FieldReason, why).Msg("departed node not reaped")
	h.em.Emit(&sluicev1.Event{Kind: events.KindNode, Id: node, Type: EventReapPostponed, Node: node,
		Reason: fmt.Sprintf("presence lease expired at least %s ago, but %s", r.cfg.Grace, why)})
}

// guard holds a mass deletion: when at least two nodes are due and they
// are more than HoldShare of the nodes that own keys, only the nodes an
// operator confirmed (control/reaper.confirm) are reaped; the rest are held,
// reported once per held set. A confirmation whose nodes are all reaped or
// back is deleted. Nothing is reaped when the confirmation cannot be read.
func (r *Reaper) guard(ctx context.Context, h *handles, due []string, f *fleet) ([]string, error) {
	conf, err := h.confirms.Get(ctx, contract.KeyReapConfirm)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case errors.Is(err, store.ErrUndecodable):
		h.quarantine.Report(contract.BucketControl, contract.KeyReapConfirm, conf.Revision, err, "no held node is reaped until it is readable")
	case err != nil:
		return nil, fmt.Errorf("read %s/%s: %w", contract.BucketControl, contract.KeyReapConfirm, err)
	}
	confirmed := map[string]bool{}
	for _, n := range conf.Value.GetNodes() {
		confirmed[n] = true
	}
	if len(confirmed) > 0 && !slices.ContainsFunc(conf.Value.GetNodes(), func(n string) bool { return f.owns(n) && !f.present[n] }) {
		// Every confirmed node is reaped or back: the confirmation is spent.
		if err := h.confirms.Delete(ctx, contract.KeyReapConfirm, conf.Revision); err == nil {
			r.log.Info().Strs("nodes", conf.Value.GetNodes()).Msg("reap confirmation spent: every node it names is reaped or back")
		}
	}
	if len(due) < 2 || float64(len(due)) <= r.cfg.HoldShare*float64(f.owners()) {
		r.holding = ""
		r.cfg.Metrics.heldNodes(0)
		return due, nil
	}
	var reap, hold []string
	for _, n := range due {
		if confirmed[n] {
			reap = append(reap, n)
		} else {
			hold = append(hold, n)
		}
	}
	r.cfg.Metrics.heldNodes(len(hold))
	if key := strings.Join(hold, ","); len(hold) > 0 && key != r.holding {
		r.holding = key
		reason := fmt.Sprintf("%d of the %d nodes with keys departed more than %s ago (more than the guard's %.0f%%): a control-plane "+
			"or network outage looks like this, so their keys are kept until they come back or an operator runs `sluice reaper confirm`; held: %s",
			len(due), f.owners(), r.cfg.Grace, 100*r.cfg.HoldShare, listed(hold, 10))
		r.log.Warn().Int("held", len(hold)).Int("nodes", f.owners()).Str(logging.FieldReason, reason).Msg("mass deletion held")
		h.em.Emit(&sluicev1.Event{Kind: contract.KindInstance, Id: contract.InstanceKey(Component, r.cfg.Instance), Type: EventReapHeld, Reason: reason})
	}
	return reap, nil
}

// listed names at most n of names, then how many more.
func listed(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + fmt.Sprintf(" and %d more", len(names)-n)
}
