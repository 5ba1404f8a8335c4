package coordinator

// The load: what a new term reads before its first step.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/rollout-coordinator/internal/rollout"
)

// load reads everything the coordinator owns or depends on. Presence, status
// and head come from the watchers' initial values, so the live changes that
// follow continue exactly where the read ended.
func (lp *loop) load(ctx context.Context, w watches) (rollout.Loaded, error) {
	// The nodes' values are taken in one by one as they are read
	// (rollout.Intake): holding every decoded value of the fleet until
	// Decide took them was most of the coordinator's peak heap.
	ev := rollout.Loaded{Term: lp.term.epoch, InvalidExpiry: lp.cfg.InvalidExpiry, Intake: rollout.NewIntake()}
	presences, statuses := 0, 0
	// The store bound every value to its key (a presence or status naming
	// another node — what a compromised agent would write to act as
	// another — is unreadable: pkg/contract/wellformed).
	// A presence that does not decode is no presence, but its node is
	// not gone either (a lapsed lease leaves no key): the decider keeps a
	// node the active rollout wrote (rollout.Loaded.PresenceUnreadable).
	for e := range initialWith(ctx, lp, contract.BucketNodes, w.nodes, func(e store.Entry[*sluicev1.NodePresence]) {
		ev.PresenceUnreadable = append(ev.PresenceUnreadable, e.Key)
	}) {
		e.Value.Node = e.Key
		ev.Intake.Presence(e.Value)
		presences++
	}
	for e := range initial(ctx, lp, contract.BucketStatus, w.status) {
		e.Value.Node = e.Key
		ev.Intake.Status(e.Value)
		statuses++
		lp.cfg.Metrics.nodePhase(e.Key, e.Value)
	}
	for e := range initial(ctx, lp, contract.BucketRevisions, w.head) {
		ev.Head = e.Value
	}
	if ctx.Err() != nil {
		return ev, ctx.Err()
	}
	var err error
	if ev.Head != nil {
		if ev.HeadRev, err = lp.revision(ctx, contract.BucketRevisions, contract.KeyHead, ev.Head.GetRevision()); err != nil {
			return ev, err
		}
		if ev.StoreLost, err = lp.storeLost(ctx); err != nil {
			return ev, err
		}
		if ev.StoreConfirmed, err = lp.storeConfirmed(ctx); err != nil {
			return ev, err
		}
		id := contract.RolloutID(ev.Head.GetGeneration(), ev.Head.GetRevision())
		r, err := lp.rollouts.Get(ctx, id)
		switch {
		case err == nil:
			ev.HeadRollout = r.Value
			lp.kv.setRev(contract.BucketRollouts, id, r.Revision)
		case errors.Is(err, store.ErrUndecodable):
			// Its record exists: the decider decides what that means
			// (rollout.Loaded.HeadRolloutLost).
			lp.quarantine.Report(contract.BucketRollouts, id, r.Revision, err, "the head's rollout is taken as ended: it was started and is never run again")
			ev.HeadRolloutLost = strings.TrimPrefix(err.Error(), "get ")
		case !errors.Is(err, store.ErrNotFound):
			return ev, err
		}
	}
	if ref, err := lp.refs.Get(ctx, contract.KeyLastApplied); err == nil {
		lp.kv.setRev(contract.BucketRollouts, contract.KeyLastApplied, ref.Revision)
		ev.LastApplied = ref.Value
		if ev.LastAppliedRev, err = lp.revision(ctx, contract.BucketRollouts, contract.KeyLastApplied, ref.Value.GetRevision()); err != nil {
			return ev, err
		}
	} else if errors.Is(err, store.ErrUndecodable) {
		lp.kv.setRev(contract.BucketRollouts, contract.KeyLastApplied, ref.Revision)
		// The pointer is lost, not what it pointed at: the newest record in
		// force says the same. Without it no config would be in force, and a
		// node coming back after a reap, or reverted without a readable
		// backup, would get nothing, or the empty config (chaos seeds 300, 542).
		r, lerr := lp.newestInForce(ctx)
		if lerr != nil {
			return ev, lerr
		}
		if r == nil {
			lp.quarantine.Report(contract.BucketRollouts, contract.KeyLastApplied, ref.Revision, err, "no rollout is taken as the last applied: no record of one in force is stored")
		} else {
			lp.quarantine.Report(contract.BucketRollouts, contract.KeyLastApplied, ref.Revision, err,
				"the newest rollout record in force, "+r.GetId()+", is taken as the last applied")
			ev.LastApplied = &sluicev1.RolloutRef{Rollout: r.GetId(), Revision: r.GetRevision(), Generation: r.GetGeneration(), At: r.GetFinishedAt()}
			if ev.LastAppliedRev, err = lp.revision(ctx, contract.BucketRollouts, r.GetId(), r.GetRevision()); err != nil {
				return ev, err
			}
		}
	} else if !errors.Is(err, store.ErrNotFound) {
		return ev, err
	}
	if ref, err := lp.refs.Get(ctx, contract.KeyActive); err == nil {
		lp.kv.setRev(contract.BucketRollouts, contract.KeyActive, ref.Revision)
		r, err := lp.rollouts.Get(ctx, ref.Value.GetRollout())
		switch {
		case err == nil:
			lp.kv.setRev(contract.BucketRollouts, r.Key, r.Revision)
			ev.Active = r.Value
			if ev.ActiveRev, err = lp.revision(ctx, contract.BucketRollouts, r.Key, r.Value.GetRevision()); err != nil && !errors.Is(err, store.ErrNotFound) {
				return ev, err
			}
		case errors.Is(err, store.ErrUndecodable), errors.Is(err, store.ErrNotFound):
			// Its record cannot be read: the decider stops the rollout and
			// reverts what it touched (rollout.LostRollout); the terminal
			// record is written over the unreadable one.
			const stopped = "the rollout is stopped, the nodes it touched are reverted, and its record is written again"
			why := err
			if errors.Is(err, store.ErrNotFound) {
				why = fmt.Errorf("rollouts/active names rollout %s, which is not stored", ref.Value.GetRollout())
				lp.quarantine.Report(contract.BucketRollouts, contract.KeyActive, ref.Revision, why, stopped)
			} else {
				lp.kv.setRev(contract.BucketRollouts, r.Key, r.Revision)
				lp.quarantine.Report(contract.BucketRollouts, ref.Value.GetRollout(), r.Revision, err, stopped)
			}
			ev.ActiveLost = &rollout.LostRollout{Ref: ref.Value, Why: strings.TrimPrefix(why.Error(), "get ")}
			if ev.ActiveRev, err = lp.revision(ctx, contract.BucketRollouts, contract.KeyActive, ref.Value.GetRevision()); err != nil && !errors.Is(err, store.ErrNotFound) {
				return ev, err
			}
		default:
			return ev, fmt.Errorf("active rollout: %w", err)
		}
	} else if errors.Is(err, store.ErrUndecodable) {
		lp.quarantine.Report(contract.BucketRollouts, contract.KeyActive, ref.Revision, err, "no rollout is taken as active")
		lp.kv.setRev(contract.BucketRollouts, contract.KeyActive, ref.Revision)
	} else if !errors.Is(err, store.ErrNotFound) {
		return ev, err
	}
	// Delete markers too: then every key's last revision is known, and a key
	// the listing did not show has never existed (no read before its first write).
	configs, err := lp.nodeconfigs.ListWithDeleted(ctx, ">")
	if err != nil {
		return ev, err
	}
	for i, c := range configs {
		configs[i] = store.Entry[*sluicev1.DesiredConfig]{} // taken in below: the listing need not keep it
		lp.kv.setRev(contract.BucketNodeConfigs, c.Key, c.Revision)
		if contract.IsControlKey(c.Key) || c.Deleted {
			continue
		}
		if c.Err != nil {
			if _, which, _ := contract.NodeOfConfigKey(c.Key); which == "backup" {
				// Treated as no backup: a revert of the node takes the last
				// applied revision's config for it, as after a reap.
				lp.quarantine.Report(contract.BucketNodeConfigs, c.Key, c.Revision, c.Err,
					"the node is treated as having no backup, and a revert gives it the last applied revision's config")
				continue
			}
			lp.quarantine.Report(contract.BucketNodeConfigs, c.Key, c.Revision, c.Err, skipped)
			continue
		}
		switch node, which, _ := contract.NodeOfConfigKey(c.Key); which {
		case "desired":
			c.Value.Node = node
			ev.Intake.Desired(c.Value)
		case "backup":
			c.Value.Node = node
			ev.Intake.Backup(c.Value)
		}
	}
	lp.kv.listed[contract.BucketNodeConfigs] = true
	bad, err := lp.invalid.List(ctx, ">")
	if err != nil {
		return ev, err
	}
	for _, f := range bad {
		if contract.IsControlKey(f.Key) {
			continue
		}
		lp.kv.setRev(contract.BucketFingerprints, f.Key, f.Revision)
		if f.Err != nil {
			lp.quarantine.Report(contract.BucketFingerprints, f.Key, f.Revision, f.Err, skipped)
			continue
		}
		f.Value.Fingerprint = f.Key
		ev.Invalid = append(ev.Invalid, f.Value)
	}
	lp.loadRequests(ctx, &ev, w)
	// The rollout the metrics show: the active one, else the head's.
	if ev.Active.GetRevision() != "" {
		lp.cfg.Metrics.rolloutSeen(ev.Active)
	} else {
		lp.cfg.Metrics.rolloutSeen(ev.HeadRollout)
	}
	lp.log.Info().Int("nodes", presences).Int("statuses", statuses).Uint64("term", lp.term.epoch).
		Str(logging.FieldRevision, ev.Head.GetRevision()).Str(logging.FieldRollout, ev.Active.GetId()).
		Msg("leading: state loaded")
	return ev, nil
}

// initial yields a watcher's initial values, up to its caught-up marker;
// values that do not decode are quarantined.
func initial[T proto.Message](ctx context.Context, lp *loop, bucket string, w <-chan store.Entry[T]) func(func(store.Entry[T]) bool) {
	return initialWith(ctx, lp, bucket, w, nil)
}

// initialWith is initial that also hands each quarantined entry to
// unreadable (nil: none).
func initialWith[T proto.Message](ctx context.Context, lp *loop, bucket string, w <-chan store.Entry[T],
	unreadable func(store.Entry[T])) func(func(store.Entry[T]) bool) {
	return func(yield func(store.Entry[T]) bool) {
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w:
				if !ok || e.Key == "" {
					return
				}
				if e.Err != nil {
					lp.quarantine.Report(bucket, e.Key, e.Revision, e.Err, skipped)
					if unreadable != nil {
						unreadable(e)
					}
					continue
				}
				if e.Deleted {
					continue
				}
				if !yield(e) {
					return
				}
			}
		}
	}
}

// revision reads revision id, named by the value at bucket/key (the store
// checked that value names one). A revision it cannot use — unreadable or
// not well-formed (pkg/contract/wellformed: a value of another type would
// read as an empty Revision, and rolling that out would empty every node) —
// is reported and returned as nil, so that what names it is not rolled out
// and the term carries on instead of ending on every start.
func (lp *loop) revision(ctx context.Context, bucket, key, id string) (*sluicev1.Revision, error) {
	e, err := lp.revisions.Get(ctx, id)
	switch {
	case errors.Is(err, store.ErrUndecodable):
		lp.quarantine.Report(contract.BucketRevisions, id, e.Revision, err, "what names it ("+bucket+"/"+key+") is not rolled out")
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("revision %s (named by %s/%s): %w", id, bucket, key, err)
	}
	return e.Value, nil
}

// loadRequests adds the operators' requests standing at the load: aborts,
// forgives, the control-plane pause, rollout pauses and freezes. A
// request's key names what it is about, whatever its value says.
func (lp *loop) loadRequests(ctx context.Context, loaded *rollout.Loaded, w watches) {
	for e := range initial(ctx, lp, contract.BucketControl, w.abort) {
		e.Value.Rollout = strings.TrimPrefix(e.Key, contract.AbortKey(""))
		loaded.Aborts = append(loaded.Aborts, e.Value)
	}
	for e := range initial(ctx, lp, contract.BucketControl, w.forgive) {
		e.Value.Fingerprint = strings.TrimPrefix(e.Key, contract.ForgiveKey(""))
		loaded.Forgives = append(loaded.Forgives, e.Value)
	}
	pauseUnreadable := false
	for e := range initialWith(ctx, lp, contract.BucketControl, w.pause, func(store.Entry[*sluicev1.PauseRequest]) { pauseUnreadable = true }) {
		loaded.Pause = e.Value
	}
	if pauseUnreadable && loaded.Pause == nil {
		// Whether the operators paused the control plane is unknown: a new
		// term holds as if they had, until a readable request is written
		// (sluice pause or resume). Generation 0 acknowledges no request.
		loaded.Pause = &sluicev1.PauseRequest{Paused: true, Joiners: contract.JoinersFreeze,
			Reason: contract.BucketControl + "/" + contract.KeyPause + " is unreadable: held as paused until a readable request is written (sluice pause or sluice resume)"}
	}
	for e := range initial(ctx, lp, contract.BucketControl, w.freeze) {
		e.Value.Id = strings.TrimPrefix(e.Key, contract.FreezeKey(""))
		loaded.Freezes = append(loaded.Freezes, e.Value)
	}
	for e := range initial(ctx, lp, contract.BucketControl, w.rolloutPause) {
		e.Value.Rollout = strings.TrimPrefix(e.Key, contract.RolloutPauseKey(""))
		loaded.RolloutPauses = append(loaded.RolloutPauses, e.Value)
	}
}

// newestInForce is the stored rollout record of the highest generation that
// ended in force (Succeeded or PartiallyFailed), nil if none: what
// rollouts/last-applied names when it can be read. Unreadable records and
// the pointers are passed over.
func (lp *loop) newestInForce(ctx context.Context) (*sluicev1.Rollout, error) {
	all, err := lp.rollouts.List(ctx, ">")
	if err != nil {
		return nil, fmt.Errorf("list rollout records: %w", err)
	}
	var best *sluicev1.Rollout
	for _, e := range all {
		if e.Err != nil || contract.IsControlKey(e.Key) || e.Key == contract.KeyActive || e.Key == contract.KeyLastApplied {
			continue
		}
		if r := e.Value; contract.InForce(r.GetPhase()) && r.GetGeneration() > best.GetGeneration() {
			best = r
		}
	}
	return best, nil
}
