package configurator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/change"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/logging"
	"github.com/sluicehq/sluice/pkg/registry"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// One registry's syncer (runSyncer): it fetches the registry's answer
// every sync interval or when nudged, retrying a failed fetch with backoff
// (fetchAttempts), has it merged (syncOnce → Service.syncRegistry, sync.go)
// and writes the registry's status from the outcome (unreachable,
// answerHeld, synced).

// syncer runs one registry's syncs.
type syncer struct {
	spec   *sluicev1.RegistrySpec
	rev    uint64 // the spec's revision in the control bucket (gitinforce.go)
	cancel context.CancelFunc
	nudge  chan struct{} // sync now (a confirmation arrived, the pause lifted)
	first  chan struct{} // closed once the first sync attempt ended
	done   chan struct{} // closed once runSyncer returned
}

// runSyncer syncs one registry until ctx ends.
func (r *registries) runSyncer(ctx context.Context, sy *syncer) {
	firstOnce := sync.OnceFunc(func() { close(sy.first) })
	defer firstOnce()
	name := sy.spec.GetName()
	log := r.log.With().Str("registry", name).Logger()
	reg, err := registry.Open(sy.spec, registry.Options{GitCache: r.cfg.gitCache}, log)
	if err != nil {
		log.Error().Err(err).Msg("registry spec cannot be used; not synced until it is fixed (sluice registry add --update)")
		r.writeStatus(ctx, name, func(st *sluicev1.RegistryStatus) {
			st.State, st.Error = sluicev1.RegistryState_REGISTRY_STATE_INVALID, err.Error()
		})
		firstOnce()
		<-ctx.Done()
		return
	}
	defer func() { _ = reg.Close() }()
	interval, after := registry.SyncInterval(sy.spec), r.cfg.deleteAfter(sy.spec)
	log.Info().Str("kind", reg.Kind()).Str("location", reg.Location()).Dur("sync_interval", interval).
		Dur("delete_after", after).Msg("syncing registry")
	pend := r.loadPending(ctx, name, log)
	failures, seeded := 0, false
	for {
		seeded = seeded || r.seedInForce(ctx, name, sy.rev, reg, log)
		ok := seeded && r.syncOnce(ctx, sy.spec, after, reg, &pend, log)
		firstOnce()
		wait := interval
		if ok {
			failures = 0
		} else if failures++; failures < fetchAttempts {
			wait = min(interval, fetchRetry.Delay(failures-1))
		}
		if ctx.Err() == nil {
			r.cfg.metrics.failed(name, failures)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		case <-sy.nudge:
		case <-reg.Changed():
		}
	}
}

// loadPending reads the deletions a registry's status says are pending,
// so that a restarted configurator (or syncer) carries on with them. What
// it cannot read starts its settle period again: safe, a deletion only
// waits longer.
func (r *registries) loadPending(ctx context.Context, name string, log zerolog.Logger) pendingState {
	cur, err := r.status.Get(ctx, name)
	if err != nil && !errors.Is(err, store.ErrNotFound) && ctx.Err() == nil {
		log.Info().Err(err).Msg("the registry's pending deletions could not be read: each starts its settle period again")
	}
	return pendingOf(cur.Value)
}

// syncOnce fetches the registry and merges its answer; false when it
// should be tried again soon (the fetch or the commit failed). after is
// the settle period of spec's deletions (Config.deleteAfter); pend is the
// registry's pending deletions, carried from one answer to the next.
func (r *registries) syncOnce(ctx context.Context, spec *sluicev1.RegistrySpec, after time.Duration, reg registry.Registry, pend *pendingState, log zerolog.Logger) bool {
	waits := func(held *sluicev1.PauseRequest) bool {
		log.Debug().Str(logging.FieldReason, contract.DescribePause(held)).Msg("registry sync waits for resume")
		return true // the resume nudges every syncer
	}
	end, held := r.gate.Begin()
	if held != nil {
		return waits(held)
	}
	end()
	// The fetch runs outside the gate: it changes nothing, so a pause (and
	// its acknowledgement) never waits on a slow or stuck registry; only
	// the commit below is a request the pause counts.
	name := spec.GetName()
	fctx, cancel := context.WithTimeout(ctx, r.cfg.fetchTimeout)
	snap, err := reg.Fetch(fctx)
	cancel()
	if ctx.Err() != nil {
		return true
	}
	if end, held = r.gate.Begin(); held != nil {
		return waits(held)
	}
	defer end()
	if err != nil {
		dropped := len(pend.since)
		*pend = pend.afterFailure()
		if errors.Is(err, registry.ErrHeld) {
			r.answerHeld(ctx, name, reg, err, dropped, log)
			return true // read again at the sync interval, not in a retry's haste
		}
		r.unreachable(ctx, name, reg, err, dropped, log)
		return false
	}
	confirm, cerr := r.confirms.Get(ctx, contract.RegistryConfirmKey(name))
	if cerr != nil && !errors.Is(cerr, store.ErrNotFound) {
		if !errors.Is(cerr, store.ErrUndecodable) {
			log.Warn().Err(cerr).Msg("read the registry's confirmation; syncing without it")
		}
		confirm.Value = nil
	}
	plan, err := r.sync(ctx, spec, snap, confirm.Value, settling{pendingState: *pend, now: r.cfg.now(), after: after})
	if err != nil {
		if ctx.Err() == nil {
			log.Warn().Err(err).Msg("registry sync could not be committed; nothing changed, retrying")
		}
		return false
	}
	*pend = afterAnswer(plan, snap)
	r.report(ctx, reg, snap, plan, log) // before the status: its note says whether it wrote
	r.synced(ctx, name, reg, snap, plan, log)
	return true
}

// unreachable records a failed fetch: state, since when, the error; an
// event on the transition only, a log line every time. dropped is how many
// pending deletions the failure emptied.
func (r *registries) unreachable(ctx context.Context, name string, reg registry.Registry, err error, dropped int, log zerolog.Logger) {
	var was sluicev1.RegistryState
	st := r.writeStatus(ctx, name, func(st *sluicev1.RegistryStatus) {
		was = st.GetState()
		if was != sluicev1.RegistryState_REGISTRY_STATE_UNREACHABLE || st.GetUnreachableSince() == nil {
			st.UnreachableSince = nowProto(r.cfg.now)
		}
		st.State, st.Error, st.Attempts = sluicev1.RegistryState_REGISTRY_STATE_UNREACHABLE, err.Error(), st.GetAttempts()+1
		st.Kind, st.Location, st.Note = reg.Kind(), reg.Location(), reg.Note()
		st.Pending, st.PendingDigest = nil, ""
	})
	log.Warn().Err(err).Uint32("attempts", st.GetAttempts()).Msg("registry unreachable: nothing changed; retrying")
	var restart string
	if dropped > 0 {
		restart = fmt.Sprintf("; the settle period of its %s pending deletion starts again with the next answer that lacks them", contract.Plural(dropped, "intent"))
		log.Info().Int("pending", dropped).Str(logging.FieldReason, "registry unreachable: a failed answer is no evidence that an intent is gone").
			Msg("pending deletions reset")
	}
	if was != sluicev1.RegistryState_REGISTRY_STATE_UNREACHABLE {
		r.events.Emit(&sluicev1.Event{Kind: kindRegistry, Id: name, Type: "RegistryUnreachable",
			Reason: fmt.Sprintf("registry %s (%s) could not be read: %v; nothing was changed, its intents stay as they are%s", name, reg.Location(), err, restart)})
	}
}

// answerHeld records an answer the registry held (registry.ErrHeld: a git
// branch rewound or rewritten, or its path removed): nothing was merged, as for a failed fetch,
// but the registry was reached, so the state is HELD with the reason in
// the error. An event and a log line when the reason changes.
func (r *registries) answerHeld(ctx context.Context, name string, reg registry.Registry, err error, dropped int, log zerolog.Logger) {
	var prev string
	r.writeStatus(ctx, name, func(st *sluicev1.RegistryStatus) {
		prev = st.GetError()
		if st.GetState() != sluicev1.RegistryState_REGISTRY_STATE_HELD {
			prev = ""
		}
		st.State, st.Error, st.UnreachableSince, st.Attempts = sluicev1.RegistryState_REGISTRY_STATE_HELD, err.Error(), nil, 0
		st.Kind, st.Location, st.Note = reg.Kind(), reg.Location(), reg.Note()
		st.Pending, st.PendingDigest = nil, ""
	})
	if prev == err.Error() {
		return
	}
	reason := fmt.Sprintf("registry %s (%s): %v; nothing was changed, its intents stay as they are", name, reg.Location(), err)
	if dropped > 0 {
		reason += fmt.Sprintf("; the settle period of its %s pending deletion starts again with the next answer that lacks them", contract.Plural(dropped, "intent"))
	}
	log.Warn().Str(logging.FieldReason, reason).Msg("registry answer held")
	r.events.Emit(&sluicev1.Event{Kind: kindRegistry, Id: name, Type: "RegistryAnswerHeld", Reason: reason})
}

// synced records a sync that was merged: its status, and an event and a log
// line for each change of what it reports.
func (r *registries) synced(ctx context.Context, name string, reg registry.Registry, snap registry.Snapshot, plan syncPlan, log zerolog.Logger) {
	owned, marked := countOwned(plan.stored, name)
	var prev *sluicev1.RegistryStatus
	r.writeStatus(ctx, name, func(st *sluicev1.RegistryStatus) {
		prev = proto.Clone(st).(*sluicev1.RegistryStatus)
		st.State = sluicev1.RegistryState_REGISTRY_STATE_SYNCED
		if plan.held != nil {
			st.State = sluicev1.RegistryState_REGISTRY_STATE_HELD
		}
		st.LastSync, st.UnreachableSince, st.Error, st.Attempts = nowProto(r.cfg.now), nil, "", 0
		st.Kind, st.Location, st.Note, st.Version = reg.Kind(), reg.Location(), reg.Note(), snap.Version
		st.Intents, st.Marked = uint32(owned), uint32(marked)
		st.Invalid, st.Conflicts, st.Held = plan.invalid, plan.conflicts, plan.held
		st.Pending, st.PendingDigest = pendingList(plan.pending, plan.after), pendingDigest(name, plan.pending)
		st.Declared = uint32(declaredCount(snap))
		st.Commit = snap.Commit
	})
	emit := func(typ, reason string) {
		r.events.Emit(&sluicev1.Event{Kind: kindRegistry, Id: name, Type: typ, Reason: reason})
	}
	if prev.GetState() == sluicev1.RegistryState_REGISTRY_STATE_HELD && prev.GetError() != "" {
		reason := fmt.Sprintf("registry %s's answer at %s is merged again: its branch descends from the commit in force, or the registry was added anew", name, shortCommit(snap.Commit))
		log.Info().Str(logging.FieldReason, reason).Msg("registry answer released")
		emit("RegistryAnswerReleased", reason)
	}
	if prev.GetState() == sluicev1.RegistryState_REGISTRY_STATE_UNREACHABLE {
		reason := fmt.Sprintf("registry %s is reachable again after %d failed fetches", name, prev.GetAttempts())
		log.Info().Str(logging.FieldReason, reason).Msg("registry reachable")
		emit("RegistryReachable", reason)
	}
	if plan.journal != nil {
		reason, ev := plan.reason(name), log.Info()
		if snap.Commit != nil {
			// The commit the sync read, said as the head's events say it.
			reason += "; from " + contract.SourceLine(plan.journal.GetProvenance())
			ev = ev.Str("commit", contract.ShortHash(snap.Commit.GetHash()))
		}
		ev.Str(logging.FieldReason, reason).Msg("registry synced")
		emit("RegistrySynced", reason)
	}
	if plan.confirmed != "" {
		what := "held"
		if plan.confirmedPending {
			what = "pending"
		}
		reason := fmt.Sprintf("registry %s: the %s deletion %s of %s went ahead, confirmed by an operator", name, what, plan.confirmed, contract.Plural(len(plan.marked), "intent"))
		log.Warn().Str(logging.FieldReason, reason).Msg(what + " deletion confirmed")
		emit("RegistryDeletionConfirmed", reason)
	}
	r.settleReport(name, plan, log, emit)
	if h := plan.held; h != nil && h.GetDigest() != prev.GetHeld().GetDigest() {
		reason := fmt.Sprintf("%s (%s, digest %s)", h.GetReason(), someIDs(h.GetIntents()), h.GetDigest())
		log.Warn().Str(logging.FieldReason, reason).Msg("registry deletion held")
		emit("RegistryDeletionHeld", reason)
	}
	if plan.held == nil && prev.GetHeld() != nil && plan.confirmed == "" {
		reason := fmt.Sprintf("registry %s no longer drops the intents it held a deletion of (digest %s): nothing to confirm", name, prev.GetHeld().GetDigest())
		log.Info().Str(logging.FieldReason, reason).Msg("registry hold released")
		emit("RegistryHoldReleased", reason)
	}
	for _, c := range plan.conflicts {
		if !slices.ContainsFunc(prev.GetConflicts(), func(p *sluicev1.RegistryConflict) bool { return proto.Equal(p, c) }) {
			reason := fmt.Sprintf("%s is declared by registry %s but owned by %s: %s's version stays, %s's is ignored until one of them drops it",
				c.GetIntent(), name, c.GetOwner(), c.GetOwner(), name)
			log.Warn().Str("intent", c.GetIntent()).Str("owner", c.GetOwner()).Msg("intent conflict between sources")
			r.events.Emit(&sluicev1.Event{Kind: events.KindIntent, Id: intentKeyOfID(c.GetIntent()), Type: "IntentConflict", Reason: reason})
		}
	}
	var fresh []string
	for _, fe := range plan.invalid {
		if !slices.ContainsFunc(prev.GetInvalid(), func(p *sluicev1.FieldError) bool { return proto.Equal(p, fe) }) {
			fresh = append(fresh, intent.FormatFieldError(fe))
		}
	}
	if len(fresh) > 0 {
		reason := fmt.Sprintf("registry %s declares %s that cannot be used; the last valid version of each stays in force: %s",
			name, contract.Plural(len(fresh), "problem"), strings.Join(fresh[:min(len(fresh), maxListedErrors)], "; "))
		log.Warn().Int("problems", len(fresh)).Str(logging.FieldReason, reason).Msg("registry intents invalid")
		emit("RegistryIntentsInvalid", reason)
	}
}

// settleReport logs, and publishes, each change of the pending deletions
// one sync made (once: each is a transition of this sync's plan).
func (r *registries) settleReport(name string, plan syncPlan, log zerolog.Logger, emit func(typ, reason string)) {
	if len(plan.cancelled) > 0 {
		reason := fmt.Sprintf("registry %s declares %s again: %s within the settle period, so the answer that dropped %s was partial; nothing was marked",
			name, someIDs(plan.cancelled), pluralVerb(len(plan.cancelled), "it came back", "they came back"), pluralVerb(len(plan.cancelled), "it", "them"))
		log.Info().Strs("intents", plan.cancelled).Str(logging.FieldReason, reason).Msg("pending deletion cancelled")
		emit("RegistryDeletionCancelled", reason)
	}
	var parts []string
	if len(plan.entered) > 0 {
		parts = append(parts, fmt.Sprintf("registry %s no longer declares %s", name, whenList(plan.pending, plan.after, plan.entered)))
	}
	if len(plan.restarted) > 0 {
		parts = append(parts, fmt.Sprintf("registry %s's answer grew (it declares more, or a pending intent again), so the settle period starts again for %s",
			name, whenList(plan.pending, plan.after, plan.restarted)))
	}
	if len(parts) > 0 {
		reason := strings.Join(parts, "; ") + fmt.Sprintf(
			"; each is marked for deletion only if every answer until then lacks it (the settle period, %s): a source that is recovering answers partially. To mark them at once: sluice registry confirm %s",
			plan.after, name)
		log.Info().Strs("intents", append(slices.Clone(plan.entered), plan.restarted...)).Str(logging.FieldReason, reason).Msg("registry deletion pending")
		emit("RegistryDeletionPending", reason)
	}
	if len(plan.reset) > 0 {
		log.Info().Strs("intents", plan.reset).Str(logging.FieldReason, fmt.Sprintf(
			"registry %s's answer is held (%s): it is no evidence either way, so the pending deletions are reset and their settle period starts again once the hold is released",
			name, plan.held.GetReason())).Msg("pending deletions reset")
	}
	if len(plan.settled) > 0 {
		log.Info().Strs("intents", plan.settled).Str(logging.FieldReason, fmt.Sprintf(
			"registry %s's answers lacked %s for the whole settle period (%s): marked for deletion", name, someIDs(plan.settled), plan.after)).
			Msg("pending deletion effective")
	}
}

// writeStatus changes registry name's status with compare-and-set and
// returns it as written (as computed, when the write failed: the next
// sync writes it again).
func (r *registries) writeStatus(ctx context.Context, name string, change func(*sluicev1.RegistryStatus)) *sluicev1.RegistryStatus {
	var out *sluicev1.RegistryStatus
	_, err := r.status.Mutate(ctx, name, func(cur *sluicev1.RegistryStatus) (*sluicev1.RegistryStatus, error) {
		next := &sluicev1.RegistryStatus{}
		if cur != nil {
			next = proto.Clone(cur).(*sluicev1.RegistryStatus)
		}
		next.Name = name
		change(next)
		next.UpdatedAt = nowProto(r.cfg.now)
		out = next
		return next, nil
	})
	if err != nil && ctx.Err() == nil {
		r.log.Warn().Err(err).Str("registry", name).Msg("write registry status")
	}
	if ctx.Err() == nil {
		r.cfg.metrics.status(out)
	}
	return out
}

// countOwned counts the stored intents registry name owns, and its marked ones.
func countOwned(live map[string]change.Stored, name string) (owned, marked int) {
	for _, e := range live {
		if e.Value.GetSource() != name {
			continue
		}
		if e.Value.GetMarkedForDeletion() {
			marked++
		} else {
			owned++
		}
	}
	return owned, marked
}

// shortCommit is a commit as git log --oneline shows it; "-" for none.
func shortCommit(c *sluicev1.GitCommit) string {
	if c == nil {
		return "-"
	}
	return fmt.Sprintf("%.12s (%s)", c.GetHash(), c.GetSubject())
}

// pluralVerb is one when n is 1, else many.
func pluralVerb(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// intentKeyOfID turns "<kind>/<name>" into "<kind>.<name>".
func intentKeyOfID(id string) string { return strings.Replace(id, "/", ".", 1) }
