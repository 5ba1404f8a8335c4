package reaper

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// EventRevisionsReaped: revisions beyond the retention that nothing
// referenced were deleted (kind revision, id the newest deleted).
const EventRevisionsReaped = "RevisionsReaped"

// DefaultRevisionRetention is how many revisions are kept besides the
// referenced ones.
const DefaultRevisionRetention = 50

// revisionCheckKey is the throwaway key the head fence of a revision delete
// is written to (a control key: listings skip it).
const revisionCheckKey = "_reaper"

// CollectRevisions deletes the revisions beyond the newest
// RevisionRetention (by creation) that nothing references: not the head,
// the active or last-applied rollout's, any rollout record's revision or
// previous revision (history and undo name them), nor any node's desired
// or backup config's. The deletes are one atomic batch fenced on
// revisions/head, so a head moved meanwhile (an undo may point it at an old
// revision) makes the batch fail and the next pass look again; each delete
// is compare-and-set on the revision it listed. Nothing is collected during
// an apply in progress or when anything referenced cannot be read.
func (r *Reaper) CollectRevisions(ctx context.Context) error {
	if r.cfg.RevisionRetention < 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	h, err := r.open(ctx)
	if err != nil {
		return err
	}
	if hold, err := r.holdForLoss(ctx, h); hold || err != nil {
		return err
	}
	all, err := h.revs.List(ctx, ">")
	if err != nil {
		return fmt.Errorf("list revisions: %w", err)
	}
	var revs []store.Entry[*sluicev1.Revision]
	for _, e := range all {
		if contract.IsControlKey(e.Key) || e.Key == contract.KeyHead || e.Key == contract.KeyPending || e.Err != nil {
			continue
		}
		revs = append(revs, e)
	}
	if len(revs) <= r.cfg.RevisionRetention {
		return nil
	}
	if busy, err := applyInProgress(ctx, h); err != nil || busy {
		return err // an apply in progress: after it
	}
	inUse, err := pointersInUse(ctx, h)
	if err != nil {
		return r.unreadableStops(h, err)
	}
	if !inUse.caughtUp() {
		r.log.Debug().Msg("revisions wait: the coordinator has not started the head yet")
		return nil
	}
	used, err := r.recordedRevisions(ctx, h)
	if err != nil {
		return r.unreadableStops(h, err)
	}
	maps.Copy(used, inUse.revs)
	// Newest first; the retention keeps the first ones.
	slices.SortFunc(revs, func(a, b store.Entry[*sluicev1.Revision]) int {
		if c := b.Value.GetCreatedAt().AsTime().Compare(a.Value.GetCreatedAt().AsTime()); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	unused := func() (ops []store.Op, ids []string) {
		for _, e := range revs[r.cfg.RevisionRetention:] {
			if !used[e.Key] {
				ops = append(ops, store.Op{Key: e.Key, Revision: e.Revision})
				ids = append(ids, e.Key)
			}
		}
		return ops, ids
	}
	// The node configs (two per node) are read only when the pointers and
	// the records leave a revision unreferenced: a pass that can delete
	// nothing costs nothing that grows with the fleet.
	if ops, _ := unused(); len(ops) == 0 {
		return nil
	}
	if err := inUse.addNodeConfigs(ctx, h); err != nil {
		return r.unreadableStops(h, err)
	}
	maps.Copy(used, inUse.revs)
	ops, ids := unused()
	if len(ops) == 0 {
		return nil
	}
	ops = ops[:min(len(ops), 100)]
	ids = ids[:len(ops)]
	fence := &store.Fence{Key: contract.KeyHead, Check: revisionCheckKey, Revision: inUse.headRev}
	if _, err := store.NewBatcher(r.cfg.Conn, contract.BucketRevisions).Write(ctx, ops, fence); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return nil // the head or a revision moved since the listing: the next pass looks again
		}
		return fmt.Errorf("delete %d old revisions: %w", len(ops), err)
	}
	reason := fmt.Sprintf("kept the newest %d revisions and every referenced one; deleted %d older unreferenced: %s",
		r.cfg.RevisionRetention, len(ids), listed(ids, 5))
	r.log.Info().Int("deleted", len(ids)).Str(logging.FieldReason, reason).Msg("revisions reaped")
	h.em.Emit(&sluicev1.Event{Kind: contract.KindRevision, Id: ids[0], Type: EventRevisionsReaped, Revision: ids[0], Reason: reason})
	r.deletedSome(KindRevisions, len(ids))
	return nil
}

// recordedRevisions is every revision a rollout record names, as its
// own or as the one before it (rollout history and undo use both).
func (r *Reaper) recordedRevisions(ctx context.Context, h *handles) (map[string]bool, error) {
	records, err := h.records.List(ctx, ">")
	if err != nil {
		return nil, fmt.Errorf("list rollout records: %w", err)
	}
	used := map[string]bool{}
	for _, e := range records {
		switch {
		case contract.IsControlKey(e.Key), e.Key == contract.KeyActive, e.Key == contract.KeyLastApplied:
		case e.Err != nil:
			return nil, &unreadableError{bucket: contract.BucketRollouts, key: e.Key, rev: e.Revision, err: e.Err}
		default:
			used[e.Value.GetRevision()], used[e.Value.GetPreviousRevision()] = true, true
		}
	}
	delete(used, "")
	return used, nil
}

// inUse is what revisionsInUse found.
type inUse struct {
	revs map[string]bool // revision ids in use
	// why says what keeps each revision in use, the first found (the
	// head, a rollout pointer, else the first node config by key), and
	// configs how many node configs came from it: what a kept intent's
	// reason says (intents.go).
	why     map[string]string
	configs map[string]int
	headRev uint64 // the KV revision revisions/head was read at (0: no head), for a fence
	// headGen is the head's generation; startedGen the newest the
	// coordinator started (the active or last-applied rollout's): while it
	// is behind, the coordinator may yet start a head it has not passed.
	headGen, startedGen uint64
}

// caughtUp says whether the coordinator has started the head: the active
// or last-applied rollout's generation is at least the head's (the head is
// read before the pointers, so a pointer that caught up was written after
// it). Until then it may still start a head it read before, just
// superseded, whose revision and intents nothing else names: neither
// collector deletes anything meanwhile.
func (u inUse) caughtUp() bool { return u.headRev == 0 || u.startedGen >= u.headGen }

// revisionsInUse reads the revisions in use: the head's, the active and
// the last-applied rollout's, and the one every node's desired or backup
// config came from (a revert may put it back). A node config that does not
// decode makes it fail: which revision that node needs is unknown.
func revisionsInUse(ctx context.Context, h *handles) (inUse, error) {
	u, err := pointersInUse(ctx, h)
	if err == nil {
		err = u.addNodeConfigs(ctx, h)
	}
	return u, err
}

// pointersInUse reads the head's revision and the active and the
// last-applied rollout's.
func pointersInUse(ctx context.Context, h *handles) (inUse, error) {
	u := inUse{revs: map[string]bool{}, why: map[string]string{}, configs: map[string]int{}}
	head, err := h.heads.Get(ctx, contract.KeyHead)
	switch {
	case err == nil:
		u.revs[head.Value.GetRevision()], u.headRev, u.headGen = true, head.Revision, head.Value.GetGeneration()
		u.because(head.Value.GetRevision(), fmt.Sprintf("it is the head (generation %d)", head.Value.GetGeneration()))
	case errors.Is(err, store.ErrUndecodable):
		return u, &unreadableError{bucket: contract.BucketRevisions, key: contract.KeyHead, rev: head.Revision, err: err}
	case !errors.Is(err, store.ErrNotFound):
		return u, fmt.Errorf("read the head: %w", err)
	}
	for _, key := range []string{contract.KeyActive, contract.KeyLastApplied} {
		ref, err := h.rollouts.Get(ctx, key)
		switch {
		case err == nil:
			u.revs[ref.Value.GetRevision()] = true
			u.startedGen = max(u.startedGen, ref.Value.GetGeneration())
			if key == contract.KeyActive {
				u.because(ref.Value.GetRevision(), fmt.Sprintf("rollout %s, running, rolls it out", ref.Value.GetRollout()))
			} else {
				u.because(ref.Value.GetRevision(), fmt.Sprintf("it is in force (rollout %s, last applied)", ref.Value.GetRollout()))
			}
		case errors.Is(err, store.ErrUndecodable):
			return u, &unreadableError{bucket: contract.BucketRollouts, key: key, rev: ref.Revision, err: err}
		case !errors.Is(err, store.ErrNotFound):
			return u, fmt.Errorf("read rollouts/%s: %w", key, err)
		}
	}
	delete(u.revs, "")
	return u, nil
}

// addNodeConfigs adds the revision every node's desired or backup config
// came from.
func (u *inUse) addNodeConfigs(ctx context.Context, h *handles) error {
	configs, err := h.configs.List(ctx, ">")
	if err != nil {
		return fmt.Errorf("list node configs: %w", err)
	}
	for _, c := range configs {
		switch {
		case contract.IsControlKey(c.Key):
		case c.Err != nil:
			return &unreadableError{bucket: contract.BucketNodeConfigs, key: c.Key, rev: c.Revision, err: c.Err}
		default:
			rev := c.Value.GetRevision()
			u.revs[rev] = true
			if u.configs[rev]++; u.configs[rev] == 1 && rev != "" {
				node, which, _ := contract.NodeOfConfigKey(c.Key)
				u.because(rev, fmt.Sprintf("node %s's %s config came from it", node, which))
			}
		}
	}
	delete(u.revs, "")
	return nil
}

// because keeps why rev is in use, unless something came first.
func (u *inUse) because(rev, why string) {
	if _, ok := u.why[rev]; !ok && rev != "" {
		u.why[rev] = why
	}
}

// reason says why rev is in use, for an intent it contains: what names it
// first, how many node configs came from it, and what ends that.
func (u inUse) reason(rev string) string {
	why := fmt.Sprintf("revision %s contains it, and %s", render.Short(rev), u.why[rev])
	switch n := u.configs[rev]; {
	case n > 1:
		why += fmt.Sprintf(" (and %s more node configs)", contract.Thousands(n-1))
		fallthrough
	case n == 1:
		why += ": a revert may put that config back; it is deleted once no node's desired or backup config comes from it (the next rollout to succeed replaces them)"
	}
	return why
}

// applyInProgress reports whether revisions/pending holds an apply's
// journal: its roll-forward or rollback may write intents and revisions,
// so nothing of theirs is collected until it is done.
func applyInProgress(ctx context.Context, h *handles) (bool, error) {
	_, err := h.revisions.Get(ctx, contract.KeyPending)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read %s/%s: %w", contract.BucketRevisions, contract.KeyPending, err)
	}
	return true, nil
}

// unreadableError: a value that says what is in use does not decode, so
// what it references is unknown and nothing is collected.
type unreadableError struct {
	bucket, key string
	rev         uint64
	err         error
}

func (e *unreadableError) Error() string {
	return fmt.Sprintf("%s/%s does not decode, so what it references is unknown: %v", e.bucket, e.key, e.err)
}

func (e *unreadableError) Unwrap() error { return e.err }

// unreadableStops ends a collection that err (an *unreadableError) stopped:
// the value is reported once per stored revision (ValueUnreadable and
// a warning naming bucket and key) rather than as an error every pass, and
// nothing is collected until it is readable. Other errors are returned.
func (r *Reaper) unreadableStops(h *handles, err error) error {
	var ue *unreadableError
	if !errors.As(err, &ue) {
		return err
	}
	h.quarantine.Report(ue.bucket, ue.key, ue.rev, ue.err, "no marked intent or old revision is collected until it is readable")
	return nil
}
