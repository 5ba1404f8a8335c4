package configurator

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/registry"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Deletions need evidence, not one answer. A source that is recovering
// answers partially for a while — a Redis restarted empty and refilled key
// by key, a directory being checked out again — and each partial answer
// looks like a deletion. So an intent missing from a registry's answer is
// only *pending*: it is marked for deletion once it has been missing from
// every answer for the settle period (Config.DeleteAfter, by default twice
// the registry's sync interval and at least 30s), and:
//
//   - an empty, held or failed answer says nothing reliable: it empties the
//     pending set, and the next answer that lacks an intent starts its
//     period again (a released hold starts from zero);
//   - a pending intent that the answer declares again is no longer pending
//     (RegistryDeletionCancelled): the answer that dropped it was partial;
//   - a growing answer (more intents declared than the previous one, or a
//     pending intent back) restarts the period of every intent still
//     pending: while a source is filling up, what it lacks may still come;
//   - an operator's confirmation of the pending set's digest marks the
//     pending intents at once (sluice registry confirm).
//
// The pending set lives in the registry's status, so a restarted
// configurator carries on with it. Whatever it cannot read (no status, one
// that does not decode) restarts the period, which is safe: a deletion
// only ever waits longer, it never happens sooner.

// minDeleteAfter is the shortest default settle period: a registry synced
// every second still needs its answers to agree for this long.
const minDeleteAfter = 30 * time.Second

// pendingState is what a registry's syncer keeps between answers: the
// intents missing from every answer since when, how many intents the
// previous answer declared, and the deletion held (nil: none), whose start
// a hold of the same intents keeps.
type pendingState struct {
	since    map[string]time.Time // intent key → missing from every answer since
	declared int                  // declaredCount of the previous answer
	held     *sluicev1.HeldDeletion
}

// afterAnswer is the pending state a merged answer leaves.
func afterAnswer(plan syncPlan, snap registry.Snapshot) pendingState {
	return pendingState{since: plan.pending, declared: declaredCount(snap), held: plan.held}
}

// afterFailure is the pending state a failed fetch leaves: no pending
// deletion. A failed answer is no evidence either way, so what was pending
// starts its period again with the next answer that lacks it. A hold
// stays: the same partial answer after an outage is the same hold, and a
// confirmation of it still applies.
func (p pendingState) afterFailure() pendingState {
	return pendingState{since: map[string]time.Time{}, declared: p.declared, held: p.held}
}

// settling is what planSync needs to decide deletions that wait: the
// pending state before this answer, the time and the settle period.
type settling struct {
	pendingState
	now   time.Time
	after time.Duration // 0: an intent missing from an answer is marked at once
}

// deletions is planSync's decision on the intents an answer no longer
// declares.
type deletions struct {
	mark             []string // keys to mark now
	held             *sluicev1.HeldDeletion
	confirmed        string               // the digest of the confirmation carried out
	confirmedPending bool                 // the confirmation named the pending set, not a hold
	pending          map[string]time.Time // key → missing since, after this answer
	entered          []string             // IDs pending from this answer on
	restarted        []string             // IDs whose period starts again: the answer grew
	cancelled        []string             // IDs pending that the answer declares again
	reset            []string             // IDs pending that a held answer dropped from pending
	settled          []string             // IDs marked after their whole settle period
}

// decideDeletions decides what happens to gone, the keys (sorted) of the
// intents the registry owns that the answer does not declare, and to back,
// the pending keys it declares again. owned is how many intents the
// registry owns, declared how many the answer declares. It is pure.
func decideDeletions(spec *sluicev1.RegistrySpec, gone, back []string, owned, declared int,
	confirm *sluicev1.RegistryConfirm, st settling) deletions {
	name := spec.GetName()
	d := deletions{pending: map[string]time.Time{}}
	for _, key := range back {
		d.cancelled = append(d.cancelled, idOfKey(key))
	}
	if len(gone) == 0 {
		return d
	}
	ids := make([]string, len(gone))
	for i, key := range gone {
		ids[i] = idOfKey(key)
	}

	// A mass deletion is held, and a hold says the answer cannot be
	// trusted: nothing stays pending. A hold of the same intents as the
	// last one keeps its start; its digest names both, so a confirmation
	// of an earlier hold, left stored, never confirms a later one.
	since := st.now
	if h := st.held; h != nil && h.GetSince() != nil && slices.Equal(h.GetIntents(), ids) {
		since = h.GetSince().AsTime()
	}
	digest := deletionDigest(name, ids, since)
	share := registry.HoldShare(spec)
	var why string
	switch {
	case declared == 0:
		why = fmt.Sprintf("registry %s answered with no intent at all while it owns %s", name, contract.Plural(owned, "intent"))
	case len(gone) >= 2 && float64(len(gone)) > share*float64(owned):
		why = fmt.Sprintf("registry %s dropped %d of its %s (more than its hold share %.0f%%)", name, len(gone),
			contract.Plural(owned, "intent"), share*100)
	}
	switch {
	case why != "" && confirm.GetDigest() == digest:
		d.mark, d.confirmed = gone, digest
		return d
	case why != "":
		d.held = &sluicev1.HeldDeletion{Intents: ids, Digest: digest, Since: timestamppb.New(since),
			Reason: why + "; nothing was marked: a registry outage or a bad commit looks like that. If the intents are really gone, confirm: sluice registry confirm " + name}
		for _, key := range gone {
			if _, ok := st.since[key]; ok {
				d.reset = append(d.reset, idOfKey(key))
			}
		}
		return d
	}

	grew := declared > st.declared || len(back) > 0
	confirmed := len(st.since) > 0 && confirm.GetDigest() == pendingDigest(name, st.since)
	for i, key := range gone {
		since, was := st.since[key]
		switch {
		case st.after <= 0:
			d.mark = append(d.mark, key)
		case was && confirmed:
			d.mark = append(d.mark, key)
			d.confirmed, d.confirmedPending = confirm.GetDigest(), true
		case !was:
			d.pending[key] = st.now
			d.entered = append(d.entered, ids[i])
		case grew:
			d.pending[key] = st.now
			d.restarted = append(d.restarted, ids[i])
		case !st.now.Before(since.Add(st.after)):
			d.mark = append(d.mark, key)
			d.settled = append(d.settled, ids[i])
		default:
			d.pending[key] = since
		}
	}
	return d
}

// deleteAfter is registry spec's settle period: Config.DeleteAfter when
// given, else twice its sync interval and at least minDeleteAfter, so
// that at least two answers stand behind a deletion.
func (c Config) deleteAfter(spec *sluicev1.RegistrySpec) time.Duration {
	if c.DeleteAfter != nil {
		return *c.DeleteAfter
	}
	return max(2*registry.SyncInterval(spec), minDeleteAfter)
}

// pendingOf reads the pending state a registry's status recorded.
func pendingOf(st *sluicev1.RegistryStatus) pendingState {
	p := pendingState{since: map[string]time.Time{}, declared: int(st.GetDeclared()), held: st.GetHeld()}
	for _, pd := range st.GetPending() {
		if pd.GetMissingSince() == nil {
			continue // unknown: its period starts again
		}
		p.since[intentKeyOfID(pd.GetIntent())] = pd.GetMissingSince().AsTime()
	}
	return p
}

// pendingList is pending as the status records it, by intent, each with
// when it becomes effective.
func pendingList(pending map[string]time.Time, after time.Duration) []*sluicev1.PendingDeletion {
	out := make([]*sluicev1.PendingDeletion, 0, len(pending))
	for _, key := range sortedKeys(pending) {
		since := pending[key]
		out = append(out, &sluicev1.PendingDeletion{Intent: idOfKey(key), MissingSince: timestamppb.New(since),
			EffectiveAt: timestamppb.New(since.Add(after))})
	}
	return out
}

// pendingDigest names a pending set: the registry, and each intent with
// the start of its period. A confirmation names it, so it confirms the
// deletion the operator saw; a confirmation left stored never matches a
// later pending set, even of the same intents.
func pendingDigest(name string, pending map[string]time.Time) string {
	if len(pending) == 0 {
		return ""
	}
	h := sha256.New()
	h.Write([]byte("pending\x00" + name))
	for _, key := range sortedKeys(pending) {
		fmt.Fprintf(h, "\x00%s\x00%d", idOfKey(key), pending[key].UnixNano())
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// idOfKey turns "<kind>.<name>" into "<kind>/<name>".
func idOfKey(key string) string { return strings.Replace(key, ".", "/", 1) }

// whenList says when each pending intent becomes effective:
// "layer2network/tenant-v at 2026-05-01T12:00:30Z, …".
func whenList(pending map[string]time.Time, after time.Duration, ids []string) string {
	parts := make([]string, 0, len(ids))
	for _, id := range ids[:min(len(ids), maxNamesInReason)] {
		parts = append(parts, fmt.Sprintf("%s at %s", id, pending[intentKeyOfID(id)].Add(after).UTC().Format(time.RFC3339)))
	}
	if len(ids) > maxNamesInReason {
		parts = append(parts, fmt.Sprintf("(+%s more)", contract.Thousands(len(ids)-maxNamesInReason)))
	}
	return strings.Join(parts, ", ")
}

// CheckDeleteAfter is the one rule for a settle period (Config.DeleteAfter,
// --registry-delete-after wherever it is given): 0 or more. Callers name
// the flag or field and its value before the error.
func CheckDeleteAfter(d time.Duration) error {
	if d < 0 {
		return errors.New("a settle period cannot be negative: give 0 (mark a missing intent at once) or more, such as 1m")
	}
	return nil
}
