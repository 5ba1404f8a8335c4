// Package change plans changes to the stored intents without I/O: what an
// apply (Apply) or an undo (Undo) creates, updates, marks and leaves
// unchanged, whether and how a retry rolls the head out again (Retry), the
// stored intents once a change's journal landed (Landed), the set a
// revision is cut from, which intents depend on ones marked for deletion,
// and which present nodes a revision would give a fingerprint recorded
// invalid. The configurator plans every change with it (inputs read once),
// and the CLI draws a dry run's
// per-node picture with the same functions after the configurator has
// answered the dry run itself (ApplyRequest.dry_run), so a dry run and an
// apply cannot disagree.
package change

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Stored is one readable stored intent with its KV revision.
type Stored = store.Entry[*sluicev1.StoredIntent]

// Batch is the plan of applying a batch of intents over the stored ones.
type Batch struct {
	Created, Updated, Unchanged []string           // intent ids, in canonical order
	Writes                      []*sluicev1.Intent // the created and updated intents
	Prior                       []*sluicev1.PriorIntent
	// Set is the effective set after the batch (every stored intent not
	// marked for deletion, the batch upserted), in canonical order. It
	// leaves out unreadable stored values, which the caller keeps in force.
	Set []*sluicev1.Intent
	// Mark are the keys the change marks for deletion and Marked their
	// intent ids (Undo; an apply marks nothing).
	Mark, Marked []string
}

// Apply plans batch over live (readable stored intents by key, marked ones
// included). Re-applying a marked intent un-marks it; applying over an
// unreadable value (unreadable: key → its KV revision) overwrites it, and
// the prior records that revision so a rollback can restore it.
func Apply(live map[string]Stored, unreadable map[string]uint64, batch []*sluicev1.Intent) Batch {
	merged := map[string]*sluicev1.Intent{}
	for k, e := range live {
		if !e.Value.GetMarkedForDeletion() {
			merged[k] = e.Value.GetIntent()
		}
	}
	var b Batch
	for _, in := range render.Sorted(batch) {
		key := intent.Key(in)
		merged[key] = in
		cur, ok := live[key]
		switch {
		case !ok || cur.Value.GetMarkedForDeletion():
			b.Created = append(b.Created, intent.ID(in))
		case !proto.Equal(cur.Value.GetIntent(), in):
			b.Updated = append(b.Updated, intent.ID(in))
		default:
			b.Unchanged = append(b.Unchanged, intent.ID(in))
			continue
		}
		b.Writes = append(b.Writes, in)
		p := &sluicev1.PriorIntent{Key: key, KvRevision: unreadable[key]}
		if ok {
			p.Value, p.KvRevision = cur.Value, cur.Revision
		}
		b.Prior = append(b.Prior, p)
	}
	b.Set = slices.Collect(maps.Values(merged))
	render.Sort(b.Set)
	return b
}

// Effective is the set a revision is cut from: every stored intent not
// marked for deletion, in canonical order.
func Effective(live map[string]Stored) []*sluicev1.Intent {
	var out []*sluicev1.Intent
	for _, e := range live {
		if !e.Value.GetMarkedForDeletion() {
			out = append(out, e.Value.GetIntent())
		}
	}
	render.Sort(out)
	return out
}

// MarkedDependencies refuses the intents of batch that route into a VRF
// whose layer-2 network is marked for deletion and not in set (the
// effective set after the batch): the revision would drop the network the
// route needs.
func MarkedDependencies(batch, set []*sluicev1.Intent, live map[string]Stored) []*sluicev1.FieldError {
	liveVRFs := map[string]bool{}
	for _, in := range set {
		if v := in.GetLayer2Network().GetVrf(); v != "" {
			liveVRFs[v] = true
		}
	}
	markedVRFs := map[string][]string{}
	for _, key := range slices.Sorted(maps.Keys(live)) {
		e := live[key].Value
		if v := e.GetIntent().GetLayer2Network().GetVrf(); v != "" && e.GetMarkedForDeletion() {
			markedVRFs[v] = append(markedVRFs[v], fmt.Sprintf("%s (source %s)", intent.ID(e.GetIntent()), e.GetSource()))
		}
	}
	var errs []*sluicev1.FieldError
	for _, in := range batch {
		v := in.GetVrfRoute().GetVrf()
		if v == "" || liveVRFs[v] || len(markedVRFs[v]) == 0 {
			continue
		}
		errs = append(errs, &sluicev1.FieldError{Intent: intent.ID(in), Field: "spec.vrf", Rule: fmt.Sprintf(
			"routes into VRF %s, whose layer2 network %s is marked for deletion: apply that network again to keep it, or route into another VRF",
			v, strings.Join(markedVRFs[v], " and "))})
	}
	return errs
}

// Known is the known-bad set: every readable fingerprint record that is
// not forgiven, by fingerprint.
func Known(records []store.Entry[*sluicev1.InvalidFingerprint]) map[string]*sluicev1.InvalidFingerprint {
	known := map[string]*sluicev1.InvalidFingerprint{}
	for _, e := range records {
		if e.Err == nil && !contract.IsControlKey(e.Key) && e.Value.GetForgiven() == nil {
			known[e.Key] = e.Value
		}
	}
	return known
}

// Hit is a present node that a revision would give a known-bad fingerprint.
type Hit struct {
	Node, Fingerprint string
	Record            *sluicev1.InvalidFingerprint
}

// KnownBad lists, by node name, the present nodes whose config rendered
// from rev has a fingerprint in known. Unreadable presences are skipped.
func KnownBad(rev *sluicev1.Revision, nodes []store.Entry[*sluicev1.NodePresence], known map[string]*sluicev1.InvalidFingerprint) []Hit {
	if len(known) == 0 {
		return nil
	}
	var hits []Hit
	for _, n := range nodes {
		if n.Err != nil {
			continue
		}
		fp := render.Fingerprint(render.NodeConfig(rev, n.Value.GetLabels()))
		if f := known[fp]; f != nil {
			hits = append(hits, Hit{Node: n.Key, Fingerprint: fp, Record: f})
		}
	}
	slices.SortFunc(hits, func(a, b Hit) int { return strings.Compare(a.Node, b.Node) })
	return hits
}

// Describe is one line on why h is refused: "node-03 → 5f2c… (check-failed
// on node-01 in rollout 3-ab…, check mgmt: output)", the output cut to
// width characters.
func (h Hit) Describe(width int) string {
	f := h.Record
	return fmt.Sprintf("%s → %s (%s on %s in rollout %s, check %s: %s)", h.Node, render.Short(h.Fingerprint),
		or(f.GetCause(), "check-failed"), or(f.GetNode(), "?"), or(f.GetRollout(), "?"), or(f.GetCheck(), "?"), oneLine(f.GetOutput(), width))
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// oneLine is s on one line, cut to n characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
