package frr

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent/hostnet"
)

// NamePrefix starts every prefix list and route map sluice renders. VRF
// names (DNS labels, see contract.ValidName) have no '_', so the parts of
// a name split on '_' unambiguously, and a map of the cluster VRF
// (sluice_import_v4, three parts) never meets a tenant VRF's
// (sluice_<vrf>_import_v4, four).
const NamePrefix = "sluice_"

// Directions and address families of the prefix lists and route maps.
const (
	dirImport = iota // into the VRF from the cluster VRF (or, with vrfs: off, from the neighbours)
	dirExport        // out of the VRF into the cluster VRF (or to the neighbours)
)

const (
	famV4 = iota
	famV6
)

var (
	dirNames = [2]string{"import", "export"}
	famNames = [2]string{"v4", "v6"}
	famWords = [2]string{"IPv4", "IPv6"}
	// famPL is the prefix-list command, famAF the address family.
	famPL = [2]string{"ip", "ipv6"}
	famAF = [2]string{"ipv4 unicast", "ipv6 unicast"}
)

// prefixListName names the prefix list of one VRF route's import or export
// items: both families use the name (FRR keeps them apart).
func prefixListName(vrf string, dir int, seq uint32) string {
	return NamePrefix + vrf + "_" + dirNames[dir] + "_" + strconv.FormatUint(uint64(seq), 10)
}

// routeMapName names a tenant VRF's route map of one direction and family.
func routeMapName(vrf string, dir, fam int) string {
	return NamePrefix + vrf + "_" + dirNames[dir] + "_" + famNames[fam]
}

// clusterMapName names a route map of the cluster VRF: with kernel VRFs its
// `import vrf route-map` (dirImport only), with vrfs: off the maps on its
// neighbours.
func clusterMapName(dir, fam int) string {
	return NamePrefix + dirNames[dir] + "_" + famNames[fam]
}

// vrf is one VRF the config names, with its VRF routes by sequence.
type vrf struct {
	name   string // as the intents name it
	frr    string // FRR's (and the kernel's) name: hostnet.VRFName(name)
	table  uint32
	routes []route
}

// route is one VRFRoute intent.
type route struct {
	intent    string
	seq       uint32
	community string
	// items[dir][fam] are its prefix items: canonical, sorted, a set.
	items [2][2][]item
}

type item struct {
	p      netip.Prefix
	ge, le uint32
}

func (it item) String() string {
	s := it.p.String()
	if it.ge != 0 {
		s += " ge " + strconv.FormatUint(uint64(it.ge), 10)
	}
	if it.le != 0 {
		s += " le " + strconv.FormatUint(uint64(it.le), 10)
	}
	return s
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// Render returns the FRR configuration cfg means on a node with settings
// s: the VRFs, BGP instances, prefix lists and route maps sluice owns (see
// the package doc for the layout), to be merged into the operator's base
// file by Merge. It is a pure function of its inputs: the order of the
// intents does not matter and the same input gives the same bytes.
func Render(cfg *sluicev1.NodeConfig, s Settings) (string, error) {
	if err := s.Validate(); err != nil {
		return "", err
	}
	// FRR prints interface neighbours first, then addresses in order.
	s.Neighbors = slices.Clone(s.Neighbors)
	numbered := func(n Neighbor) int {
		if n.Interface != "" {
			return 0
		}
		return 1
	}
	slices.SortFunc(s.Neighbors, func(a, b Neighbor) int {
		return cmp.Or(cmp.Compare(numbered(a), numbered(b)), cmp.Compare(a.Interface, b.Interface), a.Address.Compare(b.Address))
	})
	vrfs, err := collect(cfg, s)
	if err != nil {
		return "", err
	}
	if err := checkNumbers(s, vrfs); err != nil {
		return "", err
	}
	w := &writer{}
	if s.kernelVRFs() {
		renderKernel(w, s, vrfs)
	} else {
		renderFlat(w, s, vrfs)
	}
	return w.String(), nil
}

// collect returns the config's VRFs sorted by name, each with its routes
// checked and sorted by sequence.
func collect(cfg *sluicev1.NodeConfig, s Settings) ([]vrf, error) {
	tables, err := hostnet.VRFTables(cfg, s.TableOffset, s.VRFTableBase)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	byName := map[string]*vrf{}
	for _, name := range slices.Sorted(maps.Keys(tables)) {
		byName[name] = &vrf{name: name, frr: hostnet.VRFName(name), table: tables[name]}
	}
	for _, in := range cfg.GetIntents() {
		vr := in.GetVrfRoute()
		if vr == nil {
			continue
		}
		v := byName[vr.GetVrf()]
		if v == nil {
			return nil, invalid("VRF route %s: spec.vrf is empty; name the VRF the routes leak into and out of", in.GetName())
		}
		r, err := newRoute(in.GetName(), vr)
		if err != nil {
			return nil, err
		}
		v.routes = append(v.routes, r)
	}

	out := make([]vrf, 0, len(byName))
	frrNames := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		v := *byName[name]
		if other, ok := frrNames[v.frr]; ok {
			return nil, invalid("VRFs %s and %s both map to the VRF device %s; rename one", other, v.name, v.frr)
		}
		frrNames[v.frr] = v.name
		slices.SortFunc(v.routes, func(a, b route) int {
			return cmp.Or(cmp.Compare(a.seq, b.seq), cmp.Compare(a.intent, b.intent))
		})
		for i := 1; i < len(v.routes); i++ {
			if a, b := v.routes[i-1], v.routes[i]; a.seq == b.seq {
				return nil, invalid("VRF routes %s and %s both have sequence %d in VRF %s; give each its own", a.intent, b.intent, a.seq, v.name)
			}
		}
		out = append(out, v)
	}
	return out, nil
}

// newRoute checks a VRF route and puts its prefix items in canonical form.
func newRoute(name string, vr *sluicev1.VRFRoute) (route, error) {
	r := route{intent: name, seq: vr.GetSequence(), community: vr.GetCommunity()}
	if r.seq < 1 || r.seq > 65535 {
		return route{}, invalid("VRF route %s: spec.sequence %d is outside 1-65535", name, r.seq)
	}
	if c := r.community; c != "" {
		asn, val, ok := strings.Cut(c, ":")
		_, err1 := strconv.ParseUint(asn, 10, 16)
		_, err2 := strconv.ParseUint(val, 10, 16)
		if !ok || err1 != nil || err2 != nil {
			return route{}, invalid("VRF route %s: spec.community %q is not a standard community ASN:VALUE with both parts 0-65535, e.g. 65000:100", name, c)
		}
	}
	for dir, items := range [2][]*sluicev1.PrefixItem{vr.GetImport(), vr.GetExport()} {
		for i, pi := range items {
			field := fmt.Sprintf("spec.%s[%d]", dirNames[dir], i)
			p, err := netip.ParsePrefix(pi.GetCidr())
			if err != nil {
				return route{}, invalid("VRF route %s: %s.cidr %q is not a prefix in CIDR form like 10.0.0.0/8", name, field, pi.GetCidr())
			}
			p = p.Masked()
			bits, maxBits := uint32(p.Bits()), uint32(p.Addr().BitLen())
			ge, le := pi.GetGe(), pi.GetLe()
			// FRR's own rule (its daemons, not vtysh -C, enforce it):
			// mask length <= ge <= le <= the family's width.
			switch {
			case ge != 0 && (ge < bits || ge > maxBits):
				return route{}, invalid("VRF route %s: %s.ge %d must be from the prefix length %d to %d", name, field, ge, bits, maxBits)
			case le != 0 && (le < bits || le > maxBits):
				return route{}, invalid("VRF route %s: %s.le %d must be from the prefix length %d to %d", name, field, le, bits, maxBits)
			case ge != 0 && le != 0 && ge > le:
				return route{}, invalid("VRF route %s: %s.le %d is less than its ge %d", name, field, le, ge)
			}
			fam := famV4
			if p.Addr().Is6() {
				fam = famV6
			}
			r.items[dir][fam] = append(r.items[dir][fam], item{p: p, ge: ge, le: le})
		}
		for fam := range r.items[dir] {
			list := r.items[dir][fam]
			slices.SortFunc(list, func(a, b item) int {
				return cmp.Or(a.p.Addr().Compare(b.p.Addr()), cmp.Compare(a.p.Bits(), b.p.Bits()), cmp.Compare(a.ge, b.ge), cmp.Compare(a.le, b.le))
			})
			r.items[dir][fam] = slices.Compact(list)
		}
	}
	return r, nil
}

// writer builds the configuration text. Indentation is FRR's own (one
// space per level, as `show running-config` prints it), so frr-reload's
// diff against the running config shows only real changes.
type writer struct{ strings.Builder }

func (w *writer) line(depth int, format string, args ...any) {
	w.WriteString(strings.Repeat(" ", depth))
	fmt.Fprintf(w, format, args...)
	w.WriteByte('\n')
}

// bang ends a top-level section as FRR does.
func (w *writer) bang() { w.WriteString("!\n") }

// renderKernel renders the layout with kernel VRFs: each VRF a kernel VRF
// device and a BGP instance of its own, routes leaked between it and the
// cluster VRF by `import vrf` through route maps.
func renderKernel(w *writer, s Settings, vrfs []vrf) {
	cluster := s.clusterVRF()
	// The cluster VRF's instance: the neighbours, and each tenant VRF's
	// exports through sluice_import_<fam>, which picks the VRF's export map
	// by source VRF.
	header(w, s, cluster)
	w.line(1, "no bgp ebgp-requires-policy")
	neighbors(w, s)
	for fam := range famAF {
		w.line(1, "!")
		w.line(1, "address-family %s", famAF[fam])
		redistribute(w)
		activate(w, s, fam, false)
		var from []string
		for _, v := range vrfs {
			if v.has(dirExport, fam) {
				from = append(from, v.frr)
			}
		}
		if len(from) > 0 {
			w.line(2, "import vrf route-map %s", clusterMapName(dirImport, fam))
			for _, f := range from {
				w.line(2, "import vrf %s", f)
			}
		}
		w.line(1, "exit-address-family")
	}
	w.line(0, "exit")
	w.bang()

	// Each tenant VRF's instance: its connected and static routes, and the
	// cluster VRF's routes its import map lets in.
	for _, v := range vrfs {
		w.line(0, "! VRF %s: kernel device %s, table %d", v.name, v.frr, v.table)
		header(w, s, v.frr)
		for fam := range famAF {
			w.line(1, "!")
			w.line(1, "address-family %s", famAF[fam])
			redistribute(w)
			if v.has(dirImport, fam) {
				w.line(2, "import vrf route-map %s", routeMapName(v.name, dirImport, fam))
				w.line(2, "import vrf %s", cluster)
			}
			w.line(1, "exit-address-family")
		}
		w.line(0, "exit")
		w.bang()
	}

	prefixLists(w, vrfs)
	for _, v := range vrfs {
		for dir := range dirNames {
			for fam := range famNames {
				// A tenant VRF's map is numbered by the routes' own sequences.
				for _, r := range v.routesWith(dir, fam) {
					entry(w, routeMapName(v.name, dir, fam), int(r.seq), v.name, r, dir, fam)
				}
			}
		}
	}
	for fam := range famNames {
		n := 0
		for _, v := range vrfs {
			if !v.has(dirExport, fam) {
				continue
			}
			n++
			w.line(0, "route-map %s permit %d", clusterMapName(dirImport, fam), 10*n)
			w.line(1, "call %s", routeMapName(v.name, dirExport, fam))
			w.line(1, "match source-vrf %s", v.frr)
			w.line(0, "exit")
			w.bang()
		}
	}
}

// renderFlat renders the layout without kernel VRFs: one BGP instance in
// the default VRF, every VRF route's import items the neighbours' inbound
// policy and its export items their outbound one.
func renderFlat(w *writer, s Settings, vrfs []vrf) {
	header(w, s, defaultVRF)
	neighbors(w, s)
	for fam := range famAF {
		w.line(1, "!")
		w.line(1, "address-family %s", famAF[fam])
		redistribute(w)
		activate(w, s, fam, true)
		w.line(1, "exit-address-family")
	}
	w.line(0, "exit")
	w.bang()

	prefixLists(w, vrfs)
	for dir := range dirNames {
		for fam := range famNames {
			refs := flatEntries(vrfs, dir, fam)
			name := clusterMapName(dir, fam)
			if len(refs) == 0 {
				// The neighbours name the map: define it, letting nothing through.
				w.line(0, "route-map %s deny 65535", name)
				w.line(0, "exit")
				w.bang()
			}
			for i, x := range refs {
				entry(w, name, 10*(i+1), x.v.name, x.r, dir, fam)
			}
		}
	}
}

// ref is one VRF route's entry in a route map of the flat layout.
type ref struct {
	v *vrf
	r route
}

// flatEntries are the entries of the flat layout's map of dir and fam: one
// map for all VRFs, its entries in sequence order (VRF and intent name
// break ties), numbered 10, 20, …: a sequence orders routes only within its
// VRF, so two VRFs may use the same one.
func flatEntries(vrfs []vrf, dir, fam int) []ref {
	var refs []ref
	for i := range vrfs {
		for _, r := range vrfs[i].routesWith(dir, fam) {
			refs = append(refs, ref{&vrfs[i], r})
		}
	}
	slices.SortStableFunc(refs, func(a, b ref) int { return cmp.Compare(a.r.seq, b.r.seq) })
	return refs
}

// maxRouteMapSeq is the largest entry number of an FRR route map
// (`route-map NAME permit (1-65535)`). A prefix list's entries (5, 10, …
// per route) cannot reach FRR's largest, 4294967295: that takes 858
// million items in one route.
const maxRouteMapSeq = 65535

// checkNumbers refuses a config whose computed route map entry numbers
// FRR cannot take. A tenant VRF's map uses the routes' own sequences
// (1-65535, checked by newRoute); the maps sluice numbers 10, 20, … (the
// flat layout's, the kernel layout's cluster import map) end at entry
// 6553.
func checkNumbers(s Settings, vrfs []vrf) error {
	const most = maxRouteMapSeq / 10
	for dir := range dirNames {
		for fam := range famNames {
			if s.kernelVRFs() {
				if dir != dirExport {
					continue
				}
				n := 0
				for _, v := range vrfs {
					if !v.has(dirExport, fam) {
						continue
					}
					if n++; n > most {
						r := v.routesWith(dirExport, fam)[0]
						return invalid("VRF route %s (VRF %s, sequence %d): spec.export's %s items would make its VRF entry %d of route map %s, past FRR's largest entry %d: that map has an entry 10, 20, … for each VRF that exports %s, so at most %d VRFs on a node may",
							r.intent, v.name, r.seq, famWords[fam], 10*n, clusterMapName(dirImport, fam), maxRouteMapSeq, famWords[fam], most)
					}
				}
				continue
			}
			refs := flatEntries(vrfs, dir, fam)
			if len(refs) > most {
				x := refs[most]
				return invalid("VRF route %s (VRF %s, sequence %d): spec.%s's %s items would be entry %d of route map %s, past FRR's largest entry %d: with vrfs: off one map holds every VRF's routes, numbered 10, 20, …, so at most %d VRF routes on a node may have %s %s items (this config has %d)",
					x.r.intent, x.v.name, x.r.seq, dirNames[dir], famWords[fam], 10*(most+1), clusterMapName(dir, fam), maxRouteMapSeq, most, famWords[fam], dirNames[dir], len(refs))
			}
		}
	}
	return nil
}

// header opens the BGP instance of VRF frrVRF.
func header(w *writer, s Settings, frrVRF string) {
	if frrVRF == defaultVRF {
		w.line(0, "router bgp %d", s.ASN)
	} else {
		w.line(0, "router bgp %d vrf %s", s.ASN, frrVRF)
	}
	w.line(1, "bgp router-id %s", s.RouterID)
}

// neighbors declares the neighbours, activated per family by activate.
func neighbors(w *writer, s Settings) {
	if len(s.Neighbors) == 0 {
		return
	}
	w.line(1, "no bgp default ipv4-unicast")
	for _, n := range s.Neighbors {
		if n.Interface != "" {
			w.line(1, "neighbor %s interface remote-as %s", n.Interface, n.RemoteAS)
		} else {
			w.line(1, "neighbor %s remote-as %s", n.Address, n.RemoteAS)
		}
		if n.ConnectRetry != 0 {
			w.line(1, "neighbor %s timers connect %d", n.id(), n.ConnectRetry)
		}
	}
}

// activate activates each neighbour in family fam: an address neighbour in
// its address's family, an interface (unnumbered) one in both. With policy,
// the cluster maps filter what it sends and accepts.
func activate(w *writer, s Settings, fam int, policy bool) {
	for _, n := range s.Neighbors {
		if n.Interface == "" && n.Address.Is6() != (fam == famV6) {
			continue
		}
		w.line(2, "neighbor %s activate", n.id())
		if policy {
			w.line(2, "neighbor %s route-map %s in", n.id(), clusterMapName(dirImport, fam))
			w.line(2, "neighbor %s route-map %s out", n.id(), clusterMapName(dirExport, fam))
		}
	}
}

func redistribute(w *writer) {
	w.line(2, "redistribute connected")
	w.line(2, "redistribute static")
}

// prefixLists renders the prefix lists of the VRFs' routes, IPv4 before
// IPv6 as FRR prints them, entries numbered 5, 10, … as FRR numbers them.
func prefixLists(w *writer, vrfs []vrf) {
	for fam := range famNames {
		some := false
		for _, v := range vrfs {
			for _, r := range v.routes {
				for dir := range dirNames {
					for i, it := range r.items[dir][fam] {
						w.line(0, "%s prefix-list %s seq %d permit %s", famPL[fam], prefixListName(v.name, dir, r.seq), 5*(i+1), it)
						some = true
					}
				}
			}
		}
		if some {
			w.bang()
		}
	}
}

// entry renders route map entry seq of map name: r's prefix list of dir and
// fam; on exports, r's community.
func entry(w *writer, name string, seq int, vrfName string, r route, dir, fam int) {
	w.line(0, "! VRF route %s (VRF %s, sequence %d)", r.intent, vrfName, r.seq)
	w.line(0, "route-map %s permit %d", name, seq)
	w.line(1, "match %s address prefix-list %s", famPL[fam], prefixListName(vrfName, dir, r.seq))
	if dir == dirExport && r.community != "" {
		w.line(1, "set community %s", r.community)
	}
	w.line(0, "exit")
	w.bang()
}

// has reports whether any of v's routes has items of dir and fam.
func (v vrf) has(dir, fam int) bool { return len(v.routesWith(dir, fam)) > 0 }

// routesWith returns v's routes with items of dir and fam, by sequence.
func (v vrf) routesWith(dir, fam int) []route {
	var out []route
	for _, r := range v.routes {
		if len(r.items[dir][fam]) > 0 {
			out = append(out, r)
		}
	}
	return out
}
