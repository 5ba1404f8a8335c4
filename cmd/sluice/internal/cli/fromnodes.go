package cli

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// fromnodes.go is the decision of `sluice recover --from-nodes`, pure: from
// what each live node answered (its last-good config and its labels),
// rebuild the intents by union and give each a node selector. The command
// around it (recover_nodes.go) only asks the nodes and writes the result.

// EditLabel is the label a rebuilt selector gets when the labels common to
// the nodes that carry the intent also select a node that does not: no
// node carries it, so until an operator edits the selector the intent
// selects nothing (and applying it unedited takes it off its nodes).
const EditLabel = "sluice-recover-EDIT-ME"

// nodeAnswer is what one live node said when asked for its last-good.
type nodeAnswer struct {
	Node   string
	Labels map[string]string
	// Err says why the node gave no config to rebuild from: it did not
	// answer, or its answer could not be used. "" when it answered.
	Err string
	// Config is its last-good; nil with Err "" when it holds none (it runs
	// nothing).
	Config *sluicev1.DesiredConfig
}

// rebuiltIntent is one intent rebuilt from the nodes that carry it.
type rebuiltIntent struct {
	ID     string
	Intent *sluicev1.Intent // with its rebuilt selector
	Nodes  []string         // the nodes that carry it, sorted
	// Common are the labels every node in Nodes has: the selector unless
	// OverSelects is set.
	Common map[string]string
	// OverSelects are the nodes that answered without this intent that
	// Common would select: the selector is then Common plus EditLabel.
	OverSelects []string
	// Cut: Common has more labels than a selector may hold; the selector
	// is the fewest of them that exclude the same answered nodes.
	Cut bool
	// Unasked are the nodes that gave no config the selector selects: what
	// they run is not known, and applying gives them this intent.
	Unasked []string
}

// variant is one content of a conflicting intent and the nodes carrying it.
type variant struct {
	Intent *sluicev1.Intent
	Nodes  []string
}

// intentConflict is one kind+name that two nodes carry with different content.
type intentConflict struct {
	ID       string
	Variants []variant // by first node
}

// rebuild is the outcome: the intents, the conflicts, and what the nodes ran.
type rebuild struct {
	Intents   []rebuiltIntent  // by kind and name
	Conflicts []intentConflict // by id
	// Revisions maps each revision the nodes ran to its nodes.
	Revisions map[string][]string
	// Empty are the nodes that answered that they hold no last-good.
	Empty []string
	// Failed are the nodes that gave no config (Err set), sorted.
	Failed []nodeAnswer
}

// NeedsReview says whether the operator must resolve something before the
// files are applied.
func (r rebuild) NeedsReview() bool {
	if len(r.Conflicts) > 0 || len(r.Failed) > 0 {
		return true
	}
	return slices.ContainsFunc(r.Intents, func(in rebuiltIntent) bool { return len(in.OverSelects) > 0 || len(in.Unasked) > 0 })
}

// rebuildIntents is the decision. Answers may come in any order: the
// outcome is sorted throughout.
func rebuildIntents(answers []nodeAnswer) rebuild {
	answers = slices.Clone(answers)
	slices.SortFunc(answers, func(a, b nodeAnswer) int { return strings.Compare(a.Node, b.Node) })
	r := rebuild{Revisions: map[string][]string{}}
	variants := map[string][]variant{} // by intent id
	var answered []nodeAnswer
	for _, a := range answers {
		switch {
		case a.Err != "":
			r.Failed = append(r.Failed, a)
			continue
		case a.Config == nil || a.Config.GetFingerprint() == "":
			r.Empty = append(r.Empty, a.Node)
		default:
			r.Revisions[a.Config.GetRevision()] = append(r.Revisions[a.Config.GetRevision()], a.Node)
		}
		answered = append(answered, a)
		for _, in := range a.Config.GetConfig().GetIntents() {
			in = intent.WithoutSelector(in) // a node's config has none; never trust that
			id := intent.ID(in)
			vs := variants[id]
			i := slices.IndexFunc(vs, func(v variant) bool { return proto.Equal(v.Intent, in) })
			if i < 0 {
				vs = append(vs, variant{Intent: in})
				i = len(vs) - 1
			}
			vs[i].Nodes = append(vs[i].Nodes, a.Node)
			variants[id] = vs
		}
	}
	ids := slices.Sorted(maps.Keys(variants))
	for _, id := range ids {
		vs := variants[id]
		if len(vs) > 1 {
			r.Conflicts = append(r.Conflicts, intentConflict{ID: id, Variants: vs})
			continue
		}
		r.Intents = append(r.Intents, selectorFor(vs[0], answered, r.Failed))
	}
	slices.SortFunc(r.Intents, func(a, b rebuiltIntent) int {
		return cmp.Or(render.Compare(a.Intent, b.Intent), strings.Compare(a.ID, b.ID))
	})
	return r
}

// selectorFor gives v the labels common to its nodes as its selector, and
// checks that selector against every node that answered without it.
func selectorFor(v variant, answered, failed []nodeAnswer) rebuiltIntent {
	carries := map[string]bool{}
	for _, n := range v.Nodes {
		carries[n] = true
	}
	var common map[string]string
	for _, a := range answered {
		if !carries[a.Node] {
			continue
		}
		if common == nil {
			common = maps.Clone(a.Labels)
			if common == nil {
				common = map[string]string{}
			}
			continue
		}
		maps.DeleteFunc(common, func(k, val string) bool { return a.Labels[k] != val })
	}
	out := rebuiltIntent{ID: intent.ID(v.Intent), Nodes: v.Nodes, Common: common}
	sel := &sluicev1.NodeSelector{MatchLabels: maps.Clone(common)}
	var others []map[string]string // answered nodes without it that common excludes
	for _, a := range answered {
		switch {
		case carries[a.Node]:
		case render.Selects(sel, a.Labels):
			out.OverSelects = append(out.OverSelects, a.Node)
		default:
			others = append(others, a.Labels)
		}
	}
	if len(common) > contract.MaxSelectorLabels {
		// Kubernetes nodes share dozens of labels; a selector may hold
		// MaxSelectorLabels. Keep the few that exclude the same nodes.
		sel.MatchLabels = excluding(common, others)
		out.Cut = true
	}
	for _, a := range failed {
		if render.Selects(sel, a.Labels) {
			out.Unasked = append(out.Unasked, a.Node)
		}
	}
	if len(out.OverSelects) > 0 {
		if sel.MatchLabels == nil {
			sel.MatchLabels = map[string]string{}
		}
		sel.MatchLabels[EditLabel] = "true"
	}
	if len(sel.GetMatchLabels()) == 0 {
		sel = nil // every node: no selector, as a file would say it
	}
	out.Intent = intent.WithSelector(v.Intent, sel)
	return out
}

// excluding picks, from common, labels until every node of others has one
// it lacks: each time the label (by key, for ties) that the most of the
// nodes still selected lack. Every node of others lacks one of common, so
// this ends; for the fleets it is meant for (a zone, a rack) it picks one
// or two, and fills the selector up to MaxSelectorLabels with the rest.
func excluding(common map[string]string, others []map[string]string) map[string]string {
	keys := slices.Sorted(maps.Keys(common))
	out := map[string]string{}
	left := slices.Clone(others)
	for len(left) > 0 {
		best, most := "", 0
		for _, k := range keys {
			n := 0
			for _, l := range left {
				if l[k] != common[k] {
					n++
				}
			}
			if n > most {
				best, most = k, n
			}
		}
		if most == 0 {
			break // cannot happen: each node in others lacks a label of common
		}
		out[best] = common[best]
		left = slices.DeleteFunc(left, func(l map[string]string) bool { return l[best] != common[best] })
	}
	// Then as many of the others as fit, in key order: as close to the
	// labels the nodes share as a selector may be.
	for _, k := range keys {
		if len(out) >= contract.MaxSelectorLabels {
			break
		}
		out[k] = common[k]
	}
	return out
}
