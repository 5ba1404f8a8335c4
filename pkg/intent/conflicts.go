package intent

import (
	"fmt"
	"slices"
	"strings"

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

// claim is a value that must be unique on a node, held by one intent.
type claim struct {
	id    string
	field string
	sel   *sluicev1.NodeSelector
}

// conflicts reports values that must be unique on a node and are claimed by
// two intents that can share a node, on both intents, each naming the other.
func (c *checker) conflicts(intents []*sluicev1.Intent) {
	groups := map[string][]claim{} // "what" → claims, e.g. "VLAN 100"
	put := func(what, id, field string, sel *sluicev1.NodeSelector) {
		groups[what] = append(groups[what], claim{id, field, sel})
	}
	for _, in := range intents {
		id, sel := ID(in), Selector(in)
		switch s := in.GetSpec().(type) {
		case *sluicev1.Intent_Layer2Network:
			if v := s.Layer2Network.GetVlan(); v != 0 {
				put(fmt.Sprintf("VLAN %d", v), id, "spec.vlan", sel)
			}
			if v := s.Layer2Network.GetVni(); v != 0 {
				put(fmt.Sprintf("VNI %d", v), id, "spec.vni", sel)
			}
		case *sluicev1.Intent_VrfRoute:
			if r := s.VrfRoute; r.GetSequence() != 0 {
				put(fmt.Sprintf("sequence %d in VRF %s", r.GetSequence(), r.GetVrf()), id, "spec.sequence", sel)
			}
		case *sluicev1.Intent_RoutingTable:
			if v := s.RoutingTable.GetTableId(); v != 0 {
				put(fmt.Sprintf("table id %d", v), id, "spec.tableId", sel)
			}
		}
	}
	for _, what := range sortedKeys(groups) {
		claims := groups[what]
		slices.SortFunc(claims, func(a, b claim) int { return strings.Compare(a.id, b.id) })
		for i, a := range claims {
			for _, b := range claims[i+1:] {
				if !CanShareNode(a.sel, b.sel) {
					continue
				}
				c.add(a.id, a.field, "%s is also used by %s, and their node selectors can match the same node", what, b.id)
				c.add(b.id, b.field, "%s is also used by %s, and their node selectors can match the same node", what, a.id)
			}
		}
	}
}
