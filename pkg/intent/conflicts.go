package intent

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// CanShareNode reports whether some node could be selected by both a and b:
// true unless a label key is required by both with different values. A nil
// or empty selector selects every node.
func CanShareNode(a, b *sluicev1.NodeSelector) bool {
	bl := b.GetMatchLabels()
	for k, va := range a.GetMatchLabels() {
		if vb, ok := bl[k]; ok && vb != va {
			return false
		}
	}
	return true
}

// conflictNamesShown is how many intents a conflict names before "(+N more)".
const conflictNamesShown = 3

// claim is a value that must be unique on a node, held by one intent.
type claim struct {
	what  string // the value, e.g. "VLAN 100": claims are grouped by it
	noun  string // what holds it, plural: "routing tables"
	id    string
	field string
	sel   *sluicev1.NodeSelector
}

// conflicts reports values that must be unique on a node and are claimed by
// intents that can share a node: once per value, on the first such intent
// (the first of c.changing, when one of them claims it), naming how many claim it and the first few of them.
//
// It sorts the claims into groups by value and decides within each group
// which claims can share a node with another (clashing), so the cost is
// O(n log n) in the number of claims, not one check per pair: a value
// claimed by 3,000 intents is one error, not 9 million.
func (c *checker) conflicts(intents []*sluicev1.Intent) {
	var claims []claim
	for _, in := range intents {
		id, sel := displayID(in), Selector(in)
		switch s := in.GetSpec().(type) {
		case *sluicev1.Intent_Layer2Network:
			if v := s.Layer2Network.GetVlan(); v != 0 {
				claims = append(claims, claim{"VLAN " + strconv.FormatUint(uint64(v), 10), "layer2 networks", id, "spec.vlan", sel})
			}
			if v := s.Layer2Network.GetVni(); v != 0 {
				claims = append(claims, claim{"VNI " + strconv.FormatUint(uint64(v), 10), "layer2 networks", id, "spec.vni", sel})
			}
		case *sluicev1.Intent_VrfRoute:
			if r := s.VrfRoute; r.GetSequence() != 0 {
				claims = append(claims, claim{fmt.Sprintf("sequence %d in VRF %s", r.GetSequence(), r.GetVrf()), "VRF routes", id, "spec.sequence", sel})
			}
		case *sluicev1.Intent_RoutingTable:
			if v := s.RoutingTable.GetTableId(); v != 0 {
				claims = append(claims, claim{"table id " + strconv.FormatUint(uint64(v), 10), "routing tables", id, "spec.tableId", sel})
			}
		}
	}
	slices.SortFunc(claims, func(a, b claim) int { return cmp.Or(strings.Compare(a.what, b.what), strings.Compare(a.id, b.id)) })
	for start := 0; start < len(claims); {
		end := start + 1
		for end < len(claims) && claims[end].what == claims[start].what {
			end++
		}
		group := claims[start:end]
		start = end
		if len(group) < 2 {
			continue
		}
		var ids []string
		var first claim
		for i, clash := range clashing(group) {
			if !clash {
				continue
			}
			if len(ids) == 0 || c.changing[group[i].id] && !c.changing[first.id] {
				first = group[i]
			}
			ids = append(ids, group[i].id)
		}
		if len(ids) < 2 {
			continue
		}
		c.add(first.id, first.field, "%s is used by %s %s whose node selectors can match the same node: %s; give each its own value or selectors that cannot match one node",
			first.what, contract.Thousands(len(ids)), first.noun, listSome(ids, conflictNamesShown))
	}
}

// clashing reports, for each claim of one value, whether its selector can
// share a node with the selector of another claim of that value.
//
// Claims with the same selector clash with each other, and an empty selector
// clashes with everything. Distinct selectors over the same set of label
// keys never can share a node (they differ in some key both require). Two
// selectors over different key sets can share a node exactly when they agree
// on the keys they share, so each pair of key sets is decided with one map
// of the selectors' values on those shared keys. The cost is O(n log n) plus
// O(n) per pair of distinct key sets, which are few in practice (zone, rack,
// hostname, ...).
func clashing(group []claim) []bool {
	out := make([]bool, len(group))
	// Classes of identical selectors.
	type class struct {
		labels  map[string]string
		keys    []string // sorted
		members []int
		clash   bool
	}
	byCanon := map[string]*class{}
	var classes []*class
	for i, cl := range group {
		labels := cl.sel.GetMatchLabels()
		keys := sortedKeys(labels)
		var b strings.Builder
		for _, k := range keys {
			b.WriteString(k)
			b.WriteByte(0)
			b.WriteString(labels[k])
			b.WriteByte(0)
		}
		canon := b.String()
		cls := byCanon[canon]
		if cls == nil {
			cls = &class{labels: labels, keys: keys}
			byCanon[canon] = cls
			classes = append(classes, cls)
		}
		cls.members = append(cls.members, i)
	}
	for _, cls := range classes {
		if len(cls.keys) == 0 {
			// Selects every node: everything else in the group shares one with it.
			for i := range out {
				out[i] = true
			}
			return out
		}
		if len(cls.members) > 1 {
			cls.clash = true
		}
	}
	// Classes by their key set, in first-seen order.
	bySet := map[string][]*class{}
	var sets []string
	for _, cls := range classes {
		set := strings.Join(cls.keys, "\x00")
		if _, ok := bySet[set]; !ok {
			sets = append(sets, set)
		}
		bySet[set] = append(bySet[set], cls)
	}
	project := func(cls *class, shared []string) string {
		var b strings.Builder
		for _, k := range shared {
			b.WriteString(cls.labels[k])
			b.WriteByte(0)
		}
		return b.String()
	}
	for i, sa := range sets {
		for _, sb := range sets[i+1:] {
			as, bs := bySet[sa], bySet[sb]
			var shared []string
			for _, k := range as[0].keys {
				if _, ok := bs[0].labels[k]; ok {
					shared = append(shared, k)
				}
			}
			if len(shared) == 0 {
				// No key in common: every pair can share a node.
				for _, cls := range append(slices.Clone(as), bs...) {
					cls.clash = true
				}
				continue
			}
			index := map[string][]*class{}
			for _, cls := range bs {
				p := project(cls, shared)
				index[p] = append(index[p], cls)
			}
			hit := map[string]bool{} // projections of b's classes that some class of a matches
			for _, cls := range as {
				if p := project(cls, shared); len(index[p]) > 0 {
					cls.clash = true
					hit[p] = true
				}
			}
			for p := range hit { // marks only: the order does not matter
				for _, cls := range index[p] {
					cls.clash = true
				}
			}
		}
	}
	for _, cls := range classes {
		if cls.clash {
			for _, i := range cls.members {
				out[i] = true
			}
		}
	}
	return out
}

// listSome is the first n of ids, then "… (+K more)" for the rest.
func listSome(ids []string, n int) string {
	if len(ids) <= n {
		return strings.Join(ids, ", ")
	}
	return strings.Join(ids[:n], ", ") + " … (+" + contract.Thousands(len(ids)-n) + " more)"
}
