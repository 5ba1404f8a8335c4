package hostnet

import (
	"cmp"
	"encoding/json"
	"maps"
	"net/netip"
	"slices"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// RoutingConfigVersion is the version of the RoutingConfig format.
const RoutingConfigVersion = 1

// RoutingConfig is the routing-daemon handoff: what the config asks of
// route leaking between VRFs, which kernel routes cannot express. The
// applier writes it as indented JSON to Host.RoutingDaemonFile; a routing
// daemon (FRR or similar) or a small translator turns it into route maps.
// Everything in it is sorted, so the same config gives the same bytes.
//
//	{
//	  "version": 1,
//	  "vrfs": [
//	    {
//	      "name": "red",
//	      "device": "vrf-red",
//	      "table": 10042,
//	      "routeMaps": [
//	        {
//	          "intent": "red-leak",
//	          "sequence": 10,
//	          "community": "65000:100",
//	          "import": [{"prefix": "10.20.0.0/16", "le": 24}],
//	          "export": [{"prefix": "10.10.0.0/16"}]
//	        }
//	      ]
//	    }
//	  ]
//	}
type RoutingConfig struct {
	Version int `json:"version"`
	// VRFs are every VRF the config names (by a layer2 network or a VRF
	// route), by name.
	VRFs []RoutingVRF `json:"vrfs"`
}

// RoutingVRF is one VRF in the routing-daemon document.
type RoutingVRF struct {
	Name string `json:"name"`
	// Device is the VRF device; "" with vrfs: off.
	Device string `json:"device,omitempty"`
	// Table is the VRF's kernel table; the main table (254) with vrfs: off.
	Table uint32 `json:"table"`
	// RouteMaps are the VRF's VRFRoute intents by sequence.
	RouteMaps []RouteMap `json:"routeMaps"`
}

// RouteMap is one VRFRoute intent.
type RouteMap struct {
	Intent    string `json:"intent"`
	Sequence  uint32 `json:"sequence"`
	Community string `json:"community,omitempty"`
	// Import are the prefixes leaked into the VRF, Export those leaked out
	// of it; sorted, each list a set.
	Import []PrefixMatch `json:"import"`
	Export []PrefixMatch `json:"export"`
}

// PrefixMatch matches Prefix and, with GE and LE, longer prefixes within
// it of those lengths (0 = unset), as in a prefix list.
type PrefixMatch struct {
	Prefix string `json:"prefix"`
	GE     uint32 `json:"ge,omitempty"`
	LE     uint32 `json:"le,omitempty"`
}

// Marshal returns the document as written to the file: indented JSON with
// a final newline.
func (c RoutingConfig) Marshal() []byte {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		panic(err) // plain structs of strings and numbers always encode
	}
	return append(b, '\n')
}

// routing renders the routing-daemon document.
func (r *renderer) routing(routes []*sluicev1.Intent) (RoutingConfig, error) {
	doc := RoutingConfig{Version: RoutingConfigVersion, VRFs: []RoutingVRF{}}
	byVRF := map[string]*RoutingVRF{}
	for _, vrf := range slices.Sorted(maps.Keys(r.vrfTables)) {
		v := RoutingVRF{Name: vrf, Table: mainTable, RouteMaps: []RouteMap{}}
		if r.kernelVRFs {
			v.Device, v.Table = VRFName(vrf), r.vrfTables[vrf]
		}
		doc.VRFs = append(doc.VRFs, v)
	}
	for i := range doc.VRFs {
		byVRF[doc.VRFs[i].Name] = &doc.VRFs[i]
	}

	for _, in := range routes {
		vr := in.GetVrfRoute()
		v := byVRF[vr.GetVrf()]
		if v == nil {
			return RoutingConfig{}, invalid("VRF route %s names no VRF", in.GetName())
		}
		m := RouteMap{Intent: in.GetName(), Sequence: vr.GetSequence(), Community: vr.GetCommunity()}
		var err error
		if m.Import, err = prefixMatches(in.GetName(), "import", vr.GetImport()); err != nil {
			return RoutingConfig{}, err
		}
		if m.Export, err = prefixMatches(in.GetName(), "export", vr.GetExport()); err != nil {
			return RoutingConfig{}, err
		}
		v.RouteMaps = append(v.RouteMaps, m)
	}
	for _, v := range doc.VRFs {
		slices.SortFunc(v.RouteMaps, func(a, b RouteMap) int {
			return cmp.Or(cmp.Compare(a.Sequence, b.Sequence), cmp.Compare(a.Intent, b.Intent))
		})
		for i := 1; i < len(v.RouteMaps); i++ {
			if a, b := v.RouteMaps[i-1], v.RouteMaps[i]; a.Sequence == b.Sequence {
				return RoutingConfig{}, invalid("VRF routes %s and %s both have sequence %d in VRF %s", a.Intent, b.Intent, a.Sequence, v.Name)
			}
		}
	}
	return doc, nil
}

// prefixMatches converts a VRF route's prefix items: canonical prefixes,
// sorted, without duplicates.
func prefixMatches(intent, list string, items []*sluicev1.PrefixItem) ([]PrefixMatch, error) {
	type match struct {
		p      netip.Prefix
		ge, le uint32
	}
	var ms []match
	for i, item := range items {
		p, err := netip.ParsePrefix(item.GetCidr())
		if err != nil {
			return nil, invalid("VRF route %s: %s[%d]: %q is not a prefix in CIDR form like 10.0.0.0/8", intent, list, i, item.GetCidr())
		}
		ms = append(ms, match{p.Masked(), item.GetGe(), item.GetLe()})
	}
	slices.SortFunc(ms, func(a, b match) int {
		return cmp.Or(a.p.Addr().Compare(b.p.Addr()), cmp.Compare(a.p.Bits(), b.p.Bits()), cmp.Compare(a.ge, b.ge), cmp.Compare(a.le, b.le))
	})
	ms = slices.Compact(ms)
	out := make([]PrefixMatch, 0, len(ms))
	for _, m := range ms {
		out = append(out, PrefixMatch{Prefix: m.p.String(), GE: m.ge, LE: m.le})
	}
	return out, nil
}
