package configurator

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/change"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/registry"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/verify"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The plan of a registry sync. Every function here is pure: it takes the
// answer and the stored intents as values, not *Service, so it reaches no
// store, and the time comes in as settling (the settle rule: settle.go).
// syncRegistry (sync.go) reads, plans and commits.
//
// A registry sync merges one registry's whole answer into the stored
// intents in place, as one change through the apply journal (all or
// nothing, like an apply):
//
//   - an intent in the answer that the registry does not hold yet, or holds
//     with another spec, is written with the registry as its source;
//   - an intent the registry owns (its source) that left the answer is
//     marked for deletion (see the settle period below): the next revision
//     leaves it out and the reaper removes it once nothing references it;
//   - an intent another source owns is left alone: a conflict, reported in
//     the registry's status, never a silent winner;
//   - an intent that does not parse or breaks a rule is left as it is (its
//     last valid version stays in force) and reported per intent; so is
//     every intent last declared in a document that does not parse now;
//   - an owned intent missing from the answer is marked only once it has
//     been missing from every answer for the settle period (settle.go);
//     until then it is pending, and a partial answer deletes nothing;
//   - marking more than the registry's hold share of its intents (or all of
//     them, when the answer is empty) is held until an operator confirms
//     exactly that deletion (sluice registry confirm).
//
// A failed fetch never reaches here: nothing is known, nothing changes.

// syncPlan is what one sync would do, and what it reports.
type syncPlan struct {
	journal   *sluicev1.ApplyJournal // nil: nothing to write
	created   []string               // IDs
	updated   []string
	marked    []string
	invalid   []*sluicev1.FieldError
	conflicts []*sluicev1.RegistryConflict
	// deletions is the decision on what left the answer (settle.go): held,
	// confirmed, or pending for the settle period, after.
	deletions
	after time.Duration
	// stored is the stored intents once the sync landed (readable ones
	// by key), for the registry's status: no second read.
	stored map[string]change.Stored
}

// declared is one intent of a registry's answer.
type declared struct {
	in     *sluicev1.Intent
	origin string
}

// reason is the head's reason after a sync of registry name.
func (p syncPlan) reason(name string) string {
	var parts []string
	for _, c := range []struct {
		verb string
		ids  []string
	}{{"created", p.created}, {"updated", p.updated}, {"marked for deletion", p.marked}} {
		if len(c.ids) > 0 {
			parts = append(parts, c.verb+" "+someIDs(c.ids))
		}
	}
	why := "synced registry " + name
	if len(parts) > 0 {
		why += ": " + strings.Join(parts, "; ")
	}
	switch {
	case p.confirmedPending:
		why += " (a pending deletion confirmed by an operator)"
	case p.confirmed != "":
		why += " (a held deletion confirmed by an operator)"
	case len(p.settled) > 0:
		why += fmt.Sprintf(" (%s missing from every answer for the settle period, %s)", someIDs(p.settled), p.after)
	}
	return why
}

// planSync decides a sync from the registry's answer, the stored intents
// and the deletions pending before it (st, with the time: a zero settle
// period marks what left the answer at once). It is pure: the same inputs
// give the same plan.
func planSync(spec *sluicev1.RegistrySpec, snap registry.Snapshot, live map[string]store.Entry[*sluicev1.StoredIntent],
	unreadable map[string]uint64, confirm *sluicev1.RegistryConfirm, st settling) syncPlan {
	name := spec.GetName()
	var plan syncPlan

	// The answer, by key. A document that did not parse protects every
	// intent last declared in it; an intent declared twice is declared by
	// neither document.
	answer := map[string]declared{}
	protectedOrigins := map[string]bool{}
	protectedKeys := map[string]bool{}
	twice := map[string][]string{}
	for _, doc := range snap.Documents {
		if doc.Err != nil {
			protectedOrigins[doc.Origin] = true
			plan.invalid = append(plan.invalid, &sluicev1.FieldError{Intent: doc.Origin, Rule: doc.Err.Error()})
		}
		for _, in := range doc.Intents {
			key := intent.Key(in)
			if prev, ok := answer[key]; ok {
				twice[key] = append(twice[key], prev.origin, doc.Origin)
			}
			answer[key] = declared{in: in, origin: doc.Origin}
		}
	}
	for _, key := range sortedKeys(twice) {
		origins := slices.Compact(slices.Sorted(slices.Values(twice[key])))
		in := answer[key].in
		delete(answer, key)
		protectedKeys[key] = true
		plan.invalid = append(plan.invalid, &sluicev1.FieldError{Intent: intent.ID(in), Field: "name",
			Rule: fmt.Sprintf("is declared in %s; each kind and name may be declared once", strings.Join(origins, " and "))})
	}
	// Each intent on its own: an invalid one keeps its last valid version.
	for _, key := range sortedKeys(answer) {
		d := answer[key]
		if errs := intent.Validate([]*sluicev1.Intent{d.in}); len(errs) > 0 {
			plan.invalid = append(plan.invalid, errs...)
			delete(answer, key)
			protectedKeys[key] = true
		}
	}

	// Where the change came from goes with it into the head (Head.source).
	jr := &sluicev1.ApplyJournal{Source: name, HasPrior: true, Origins: map[string]string{},
		Provenance: &sluicev1.Source{Registry: name, Commit: snap.Commit}}
	prior := func(key string) *sluicev1.PriorIntent {
		p := &sluicev1.PriorIntent{Key: key, KvRevision: unreadable[key]}
		if cur, ok := live[key]; ok {
			p.Value, p.KvRevision = cur.Value, cur.Revision
		}
		return p
	}
	var upserts []*sluicev1.Intent
	for _, key := range sortedKeys(answer) {
		d := answer[key]
		cur, ok := live[key]
		switch {
		case ok && !cur.Value.GetMarkedForDeletion() && cur.Value.GetSource() != name:
			plan.conflicts = append(plan.conflicts, &sluicev1.RegistryConflict{Intent: intent.ID(d.in), Owner: cur.Value.GetSource()})
			continue
		case ok && !cur.Value.GetMarkedForDeletion() && proto.Equal(cur.Value.GetIntent(), d.in):
			continue // unchanged (a moved origin alone is not a change)
		case !ok || cur.Value.GetMarkedForDeletion():
			plan.created = append(plan.created, intent.ID(d.in))
		default:
			plan.updated = append(plan.updated, intent.ID(d.in))
		}
		upserts = append(upserts, d.in)
		jr.Origins[key] = d.origin
		jr.Prior = append(jr.Prior, prior(key))
	}

	// What left the answer, and which pending deletions it declares again
	// (an intent in a document that does not parse counts as declared:
	// nothing says it is gone).
	owned := 0
	var gone, back []string
	for _, key := range sortedKeys(live) {
		cur := live[key].Value
		if cur.GetSource() != name || cur.GetMarkedForDeletion() {
			continue
		}
		owned++
		if _, ok := answer[key]; ok || protectedKeys[key] || protectedOrigins[cur.GetOrigin()] {
			if _, ok := st.since[key]; ok {
				back = append(back, key)
			}
			continue
		}
		gone = append(gone, key)
	}
	// A pending key neither gone nor back is no longer the registry's (its
	// owner changed, or it was marked): it leaves the pending set quietly.
	plan.deletions, plan.after = decideDeletions(spec, gone, back, owned, declaredCount(snap), confirm, st), st.after
	for _, key := range plan.mark {
		plan.marked = append(plan.marked, intent.ID(live[key].Value.GetIntent()))
		jr.Mark = append(jr.Mark, key)
		jr.Prior = append(jr.Prior, prior(key))
	}

	// The whole set must stay valid: an upsert that breaks a rule together
	// with the others (a VLAN another intent holds on the same nodes) is
	// left out and reported, the rest goes ahead.
	if len(upserts) > 0 {
		base := change.Effective(live)
		base = slices.DeleteFunc(base, func(in *sluicev1.Intent) bool { return slices.Contains(jr.Mark, intent.Key(in)) })
		kept, rejected := admit(base, upserts)
		if len(rejected) > 0 {
			for _, r := range rejected {
				key := intent.Key(r.in)
				plan.invalid = append(plan.invalid, r.errs...)
				delete(jr.Origins, key)
				jr.Prior = slices.DeleteFunc(jr.Prior, func(p *sluicev1.PriorIntent) bool { return p.GetKey() == key && !slices.Contains(jr.Mark, key) })
				plan.created = slices.DeleteFunc(plan.created, func(id string) bool { return id == intent.ID(r.in) })
				plan.updated = slices.DeleteFunc(plan.updated, func(id string) bool { return id == intent.ID(r.in) })
			}
		}
		upserts = kept
	}
	jr.Intents = upserts
	intent.SortFieldErrors(plan.invalid)
	if len(jr.Intents)+len(jr.Mark) > 0 {
		plan.journal = jr
	}
	return plan
}

// validateSet is every problem of a whole set a sync would produce: each
// intent's and node's rules (intent.Validate), and the fleet verifier's
// errors that hold without nodes or a strategy (pkg/verify: a VNI is one
// network everywhere, …), one FieldError per intent a finding names, its
// field "fleet: <rule>". A sync has no strategy and is planned without
// reading the nodes, so the strategy rules are the apply's alone.
func validateSet(set []*sluicev1.Intent) []*sluicev1.FieldError {
	errs := intent.Validate(set)
	for _, f := range verify.Verify(verify.Input{Intents: set}) {
		if f.GetSeverity() != sluicev1.Severity_SEVERITY_ERROR {
			continue
		}
		for _, id := range f.GetIntents() {
			errs = append(errs, &sluicev1.FieldError{Intent: id, Field: "fleet: " + f.GetRule(), Rule: f.GetMessage() + "; " + f.GetFix()})
		}
	}
	return errs
}

// rejectedIntent is an upsert left out of a sync, with the problems it causes.
type rejectedIntent struct {
	in   *sluicev1.Intent
	errs []*sluicev1.FieldError
}

// admit returns the upserts that can join base and keep it as valid as it
// is, and the ones that cannot. It tries them all at once first, then
// leaves out the upserts the problems name, and only when the problems
// name none of them (a clash reported on an intent already stored) adds
// them one at a time.
func admit(base, upserts []*sluicev1.Intent) (kept []*sluicev1.Intent, rejected []rejectedIntent) {
	baseErrs := len(validateSet(base))
	with := func(set, add []*sluicev1.Intent) []*sluicev1.Intent {
		keys := map[string]bool{}
		for _, in := range add {
			keys[intent.Key(in)] = true
		}
		out := slices.DeleteFunc(slices.Clone(set), func(in *sluicev1.Intent) bool { return keys[intent.Key(in)] })
		return append(out, add...)
	}
	kept = upserts
	for range 3 {
		errs := validateSet(with(base, kept))
		if len(errs) <= baseErrs {
			return kept, rejected
		}
		byID := map[string][]*sluicev1.FieldError{}
		for _, fe := range errs {
			byID[fe.GetIntent()] = append(byID[fe.GetIntent()], fe)
		}
		var next []*sluicev1.Intent
		for _, in := range kept {
			if e := byID[intent.ID(in)]; len(e) > 0 {
				rejected = append(rejected, rejectedIntent{in: in, errs: e})
			} else {
				next = append(next, in)
			}
		}
		if len(next) == len(kept) {
			break // the problems name no upsert
		}
		kept = next
	}
	// One at a time, in order: each joins if the set stays as valid.
	var accepted []*sluicev1.Intent
	for _, in := range kept {
		errs := validateSet(with(base, append(slices.Clone(accepted), in)))
		if len(errs) <= baseErrs {
			accepted = append(accepted, in)
			continue
		}
		var mine []*sluicev1.FieldError
		for _, fe := range errs {
			if strings.Contains(fe.GetRule(), intent.ID(in)) || fe.GetIntent() == intent.ID(in) {
				mine = append(mine, fe)
			}
		}
		if len(mine) == 0 {
			mine = errs[:1]
		}
		for _, fe := range mine {
			fe = proto.Clone(fe).(*sluicev1.FieldError)
			if fe.GetIntent() != intent.ID(in) {
				fe.Rule = fmt.Sprintf("%s: %s %s", intent.ID(in), fe.GetIntent(), fe.GetRule())
				fe.Intent = intent.ID(in)
			}
			rejected = append(rejected, rejectedIntent{in: in, errs: []*sluicev1.FieldError{fe}})
		}
	}
	return accepted, rejected
}

// deletionDigest names a held deletion: the registry, the intents it would
// mark and when the hold began. A confirmation names it, so an operator
// confirms exactly the deletion they saw, not whatever the next answer
// drops, nor a later hold of the same intents.
func deletionDigest(name string, ids []string, since time.Time) string {
	h := sha256.New()
	h.Write([]byte(name))
	for _, id := range ids {
		h.Write([]byte{0})
		h.Write([]byte(id))
	}
	fmt.Fprintf(h, "\x00%d", since.UnixNano())
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// sortedKeys is m's keys in order: decisions never follow map order.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// declaredCount is how many intents snap declares, broken documents aside:
// 0 with no broken document is an empty answer.
func declaredCount(snap registry.Snapshot) int {
	n := 0
	for _, d := range snap.Documents {
		n += len(d.Intents)
		if d.Err != nil {
			n++ // something is there, if unreadable
		}
	}
	return n
}
