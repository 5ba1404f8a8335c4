package verify

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// typoDistance is the largest edit distance at which a name is offered as
// the one meant for name: a quarter of its length, from 1 to 3 (tenant-aa
// for tenant-a, zonee for zone; not vrf-1960 for vrf-556).
func typoDistance(name string) int { return min(3, max(1, len(name)/4)) }

// naming is an intent that names a VRF.
type naming struct {
	vrf string
	in  *sluicev1.Intent
}

// vrfs checks the VRFs the intents name: one named by a single intent
// while others are established (a likely typo), routing tables shared by
// two names fleet-wide, route leaking in a cycle, and one prefix exported
// with two communities.
func (v *verifier) vrfs(ins []*sluicev1.Intent) {
	// Who names each VRF: a layer2 network routing its gateways in it, a
	// VRF route leaking in it, and the routing table of its name (which
	// binds the VRF to its table, as the agent does).
	var names []naming
	refs := map[string]bool{}
	for _, in := range ins {
		switch {
		case in.GetLayer2Network().GetVrf() != "":
			names = append(names, naming{in.GetLayer2Network().GetVrf(), in})
			refs[in.GetLayer2Network().GetVrf()] = true
		case in.GetVrfRoute().GetVrf() != "":
			names = append(names, naming{in.GetVrfRoute().GetVrf(), in})
			refs[in.GetVrfRoute().GetVrf()] = true
		}
	}
	var tables []*sluicev1.Intent
	for _, in := range ins {
		if in.GetRoutingTable() != nil {
			tables = append(tables, in)
			if refs[in.GetName()] {
				names = append(names, naming{in.GetName(), in})
			}
		}
	}
	byVRF := groupBy(names, func(n naming) string { return n.vrf })
	var established []string // named by two intents or more
	for _, g := range byVRF {
		if len(g) > 1 {
			established = append(established, g[0].vrf)
		}
	}
	if len(established) > 0 {
		for _, g := range byVRF {
			if len(g) != 1 {
				continue
			}
			name, in := g[0].vrf, g[0].in
			near, d := nearest(name, established)
			msg := fmt.Sprintf("VRF %q is named by %s only: no other intent routes, leaks or binds a table in it", name, idsOf([]*sluicev1.Intent{in})[0])
			fix := "if it is a new VRF, ignore this; else name an existing VRF"
			if d <= typoDistance(name) {
				msg += fmt.Sprintf("; did you mean %q?", near)
				fix = fmt.Sprintf("write vrf: %s (or, for a new VRF, ignore this)", near)
			}
			v.add(RuleVRFUnknown, []*sluicev1.Intent{in}, msg, fix)
		}
	}

	// A kernel table is one VRF's across the fleet: two routing tables of
	// one id under two names bind two VRFs (or devices) to one table on
	// different nodes. Per node intent.Validate already refuses it.
	for _, g := range groupBy(tables, func(in *sluicev1.Intent) string { return key(in.GetRoutingTable().GetTableId()) }) {
		if len(g) < 2 || g[0].GetRoutingTable().GetTableId() == 0 {
			continue
		}
		v.add(RuleTableShared, g, fmt.Sprintf("routing table id %d is bound to %d names across the fleet: %s", g[0].GetRoutingTable().GetTableId(), len(g), listIDs(g)),
			"a table id means one VRF everywhere: give each its own tableId, or one name (one intent)")
	}

	v.hashedTables(byVRF, tables)
	v.leaks(ins)
}

// hashedTables finds VRFs without a routing table of their name whose
// hashed kernel tables (contract.VRFTableSlot) are one, and that intents
// can put on one node: the agent refuses such a config when it renders it,
// so the rollout would fail on every such node. A collision between VRFs
// no node can carry together harms nothing, and is not reported.
func (v *verifier) hashedTables(byVRF [][]naming, tables []*sluicev1.Intent) {
	bound := map[string]bool{}
	for _, t := range tables {
		bound[t.GetName()] = true
	}
	type hashed struct {
		vrf  string
		slot uint32
		by   []*sluicev1.Intent
	}
	var hs []hashed
	for _, g := range byVRF {
		if bound[g[0].vrf] {
			continue
		}
		h := hashed{vrf: g[0].vrf, slot: contract.VRFTableSlot(g[0].vrf)}
		for _, n := range g {
			h.by = append(h.by, n.in)
		}
		hs = append(hs, h)
	}
	for _, g := range groupBy(hs, func(h hashed) string { return key(h.slot) }) {
		// Collisions are rare (a few VRFs per 100,000 slots): the pairs
		// within one are few.
		for i := range g {
			for j := i + 1; j < len(g); j++ {
				a, b := g[i], g[j]
				var shared []*sluicev1.Intent
				for _, x := range a.by {
					for _, y := range b.by {
						if intent.CanShareNode(intent.Selector(x), intent.Selector(y)) {
							shared = append(shared, x, y)
						}
					}
				}
				if len(shared) == 0 {
					continue
				}
				v.add(RuleVRFTableCollision, shared, fmt.Sprintf("VRFs %s and %s both take kernel table base + %d (no routing table binds either) and %s can select one node: the agent refuses that config",
					a.vrf, b.vrf, g[0].slot, listIDs(shared)),
					fmt.Sprintf("bind one of them to a table of its own: a RoutingTable intent named %s (or %s) with a free tableId", a.vrf, b.vrf))
			}
		}
	}
}

// leaks checks the VRF routes' prefixes: a prefix two VRFs both export and
// import loops between them through the cluster VRF, and a prefix exported
// with two communities is tagged by whichever node's route wins.
func (v *verifier) leaks(ins []*sluicev1.Intent) {
	type item struct {
		in     *sluicev1.Intent
		prefix string // canonical
		export bool
	}
	var items []item
	for _, in := range ins {
		r := in.GetVrfRoute()
		if r == nil {
			continue
		}
		for _, x := range [...]struct {
			list   []*sluicev1.PrefixItem
			export bool
		}{{r.GetImport(), false}, {r.GetExport(), true}} {
			for _, p := range x.list {
				if pfx, err := netip.ParsePrefix(p.GetCidr()); err == nil {
					items = append(items, item{in, pfx.Masked().String(), x.export})
				}
			}
		}
	}
	for _, g := range groupBy(items, func(x item) string { return x.prefix }) {
		// A cycle needs two VRFs that each both import and export the
		// prefix: each leaks it to the other. With at most one such VRF
		// every path through the prefix ends.
		imports, exports := map[string]bool{}, map[string]bool{}
		var exporters []*sluicev1.Intent
		for _, x := range g {
			vrf := x.in.GetVrfRoute().GetVrf()
			if x.export {
				exports[vrf] = true
				exporters = append(exporters, x.in)
			} else {
				imports[vrf] = true
			}
		}
		var both []string
		for vrf := range exports {
			if imports[vrf] {
				both = append(both, vrf)
			}
		}
		slices.Sort(both)
		if len(both) > 1 {
			var concerned []*sluicev1.Intent
			for _, x := range g {
				if slices.Contains(both, x.in.GetVrfRoute().GetVrf()) {
					concerned = append(concerned, x.in)
				}
			}
			v.add(RuleLeakCycle, concerned, fmt.Sprintf("prefix %s is both exported and imported by VRFs %s: each leaks it to the other in a cycle (%s)",
				g[0].prefix, strings.Join(both, ", "), listIDs(concerned)),
				"import the prefix only into the VRFs that do not originate it")
		}

		byCommunity := groupBy(exporters, func(in *sluicev1.Intent) string { return in.GetVrfRoute().GetCommunity() })
		if len(byCommunity) > 1 {
			var parts []string
			for _, c := range byCommunity {
				parts = append(parts, fmt.Sprintf("%s (%s)", orNone(c[0].GetVrfRoute().GetCommunity()), idsOf(c)[0]))
			}
			v.add(RuleExportCommunities, exporters, fmt.Sprintf("prefix %s is exported with %d communities: %s; which one its routes carry depends on the node",
				g[0].prefix, len(byCommunity), strings.Join(parts, ", ")),
				"export the prefix from one VRF route, or give every route exporting it the same community")
		}
	}
}

// nearest is the candidate closest to name by edit distance (the first in
// order among equals) and that distance; MaxInt without candidates.
func nearest(name string, candidates []string) (string, int) {
	best, bestD := "", int(^uint(0)>>1)
	for _, c := range candidates {
		if c == name {
			continue
		}
		if d := distance(name, c, bestD); d < bestD {
			best, bestD = c, d
		}
	}
	return best, bestD
}

// distance is the Levenshtein distance between a and b, or some value of at
// least bound once it is sure to be that large (so a far candidate costs
// little).
func distance(a, b string, bound int) int {
	if d := len(a) - len(b); d >= bound || -d >= bound {
		return bound
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			rowMin = min(rowMin, cur[j])
		}
		if rowMin >= bound {
			return bound
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
