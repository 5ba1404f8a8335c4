package frr_test

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent/frr"
	"github.com/sluicehq/sluice/services/agent/hostnet"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from the current output")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to write it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update rewrites it; review the diff):\n--- got\n%s", path, got)
	}
}

func vrfRoute(name, vrf string, seq uint32, community string, imp, exp []*sluicev1.PrefixItem) *sluicev1.Intent {
	return &sluicev1.Intent{Name: name, Spec: &sluicev1.Intent_VrfRoute{VrfRoute: &sluicev1.VRFRoute{
		Vrf: vrf, Sequence: seq, Community: community, Import: imp, Export: exp}}}
}

func items(specs ...string) []*sluicev1.PrefixItem {
	var out []*sluicev1.PrefixItem
	for _, s := range specs {
		f := strings.Fields(s)
		it := &sluicev1.PrefixItem{Cidr: f[0]}
		for i := 1; i+1 < len(f); i += 2 {
			var n uint32
			for _, c := range f[i+1] {
				n = n*10 + uint32(c-'0')
			}
			switch f[i] {
			case "ge":
				it.Ge = n
			case "le":
				it.Le = n
			}
		}
		out = append(out, it)
	}
	return out
}

// fabric is a node's config: VRF red leaks two routes in (IPv4 and IPv6)
// and one out with a community, blue only exports, green is only a layer2
// network's VRF.
func fabric() *sluicev1.NodeConfig {
	return &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{
		vrfRoute("red-leak", "red", 10, "65000:100",
			items("10.20.0.0/16 le 24", "2001:db8:20::/48"),
			items("10.10.0.0/16", "2001:db8:10::/48 ge 56 le 64", "10.10.0.0/16")),
		vrfRoute("red-more", "red", 20, "", items("10.30.0.0/16", "10.31.0.0/16 ge 24"), nil),
		vrfRoute("blue-out", "blue", 10, "65000:200", nil, items("10.40.0.0/16 le 32")),
		{Name: "green-l2", Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{
			Vlan: 100, Vni: 1000, Vrf: "green", AnycastGateways: []string{"10.50.0.1/24"}}}},
	}}
}

func settings() frr.Settings {
	return frr.Settings{
		ASN: 65001, RouterID: netip.MustParseAddr("192.0.2.1"),
		Neighbors: []frr.Neighbor{
			{Address: netip.MustParseAddr("192.0.2.254"), RemoteAS: "external", ConnectRetry: 1},
			{Address: netip.MustParseAddr("2001:db8::fe"), RemoteAS: "65100"},
			{Interface: "eth1", RemoteAS: "internal"},
		},
	}
}

func render(t *testing.T, cfg *sluicev1.NodeConfig, s frr.Settings) string {
	t.Helper()
	out, err := frr.Render(cfg, s)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	return out
}

func TestRender_Golden(t *testing.T) {
	clusterVRF := func(s frr.Settings) frr.Settings { s.ClusterVRF = "cluster"; s.TableOffset = 1000; return s }
	off := func(s frr.Settings) frr.Settings { s.VRFs = hostnet.VRFsOff; return s }
	withTable := fabric()
	withTable.Intents = append(withTable.Intents, &sluicev1.Intent{Name: "red",
		Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 10}}})
	noNeighbors := settings()
	noNeighbors.Neighbors = nil
	for _, tc := range []struct {
		file string
		cfg  *sluicev1.NodeConfig
		s    frr.Settings
	}{
		{"render-kernel.conf", fabric(), settings()},
		{"render-kernel-cluster-vrf.conf", withTable, clusterVRF(settings())},
		{"render-kernel-empty.conf", &sluicev1.NodeConfig{}, noNeighbors},
		{"render-off.conf", fabric(), off(settings())},
		{"render-off-empty.conf", &sluicev1.NodeConfig{}, off(settings())},
	} {
		t.Run(tc.file, func(t *testing.T) { golden(t, tc.file, render(t, tc.cfg, tc.s)) })
	}
}

// The same intents and neighbours in any order give the same bytes.
func TestRender_OrderOfIntentsAndNeighbours_DoesNotMatter(t *testing.T) {
	for _, mode := range []string{hostnet.VRFsKernel, hostnet.VRFsOff} {
		s := settings()
		s.VRFs = mode
		want := render(t, fabric(), s)
		rng := rand.New(rand.NewPCG(1, 2))
		for range 20 {
			cfg, s2 := fabric(), settings()
			s2.VRFs = mode
			rng.Shuffle(len(cfg.Intents), func(i, j int) { cfg.Intents[i], cfg.Intents[j] = cfg.Intents[j], cfg.Intents[i] })
			rng.Shuffle(len(s2.Neighbors), func(i, j int) { s2.Neighbors[i], s2.Neighbors[j] = s2.Neighbors[j], s2.Neighbors[i] })
			if got := render(t, cfg, s2); got != want {
				t.Fatalf("vrfs %s: shuffled input renders differently:\n%s\nwant\n%s", mode, got, want)
			}
		}
	}
}

// The kernel table in the rendered file is hostnet's for the same VRF.
func TestRender_VRFTable_IsHostnets(t *testing.T) {
	cfg := fabric()
	s := settings()
	s.VRFTableBase = 30000
	tables, err := hostnet.VRFTables(cfg, 0, 30000)
	if err != nil {
		t.Fatal(err)
	}
	out := render(t, cfg, s)
	for _, vrf := range []string{"red", "blue", "green"} {
		want := "! VRF " + vrf + ": kernel device " + hostnet.VRFName(vrf) + ", table " + uitoa(tables[vrf]) + "\n"
		if !strings.Contains(out, want) {
			t.Errorf("rendered file lacks %q", want)
		}
	}
}

func uitoa(n uint32) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func TestRender_Refuses(t *testing.T) {
	one := func(in ...*sluicev1.Intent) *sluicev1.NodeConfig { return &sluicev1.NodeConfig{Intents: in} }
	for _, tc := range []struct {
		name    string
		cfg     *sluicev1.NodeConfig
		edit    func(*frr.Settings)
		wantIs  error
		wantErr string
	}{
		{name: "two routes, one sequence in a VRF",
			cfg:    one(vrfRoute("a", "red", 10, "", items("10.0.0.0/8"), nil), vrfRoute("b", "red", 10, "", nil, items("10.1.0.0/16"))),
			wantIs: frr.ErrInvalidConfig, wantErr: "VRF routes a and b both have sequence 10 in VRF red"},
		{name: "sequence zero", cfg: one(vrfRoute("a", "red", 0, "", nil, nil)),
			wantIs: frr.ErrInvalidConfig, wantErr: "VRF route a: spec.sequence 0 is outside 1-65535"},
		{name: "no VRF", cfg: one(vrfRoute("a", "", 1, "", nil, nil)),
			wantIs: frr.ErrInvalidConfig, wantErr: "VRF route a: spec.vrf is empty"},
		{name: "community not ASN:VALUE", cfg: one(vrfRoute("a", "red", 1, "65000:100 no-export", nil, items("10.0.0.0/8"))),
			wantIs: frr.ErrInvalidConfig, wantErr: `spec.community "65000:100 no-export" is not a standard community`},
		{name: "community part too large", cfg: one(vrfRoute("a", "red", 1, "70000:1", nil, nil)),
			wantIs: frr.ErrInvalidConfig, wantErr: "spec.community"},
		{name: "not a prefix", cfg: one(vrfRoute("a", "red", 1, "", items("10.0.0.0"), nil)),
			wantIs: frr.ErrInvalidConfig, wantErr: `spec.import[0].cidr "10.0.0.0" is not a prefix`},
		// vtysh -C accepts these; FRR's daemons refuse them at reload.
		{name: "ge above le", cfg: one(vrfRoute("a", "red", 1, "", nil, items("10.0.0.0/8", "10.0.0.0/8 ge 24 le 16"))),
			wantIs: frr.ErrInvalidConfig, wantErr: "spec.export[1].le 16 is less than its ge 24"},
		{name: "le below the mask length", cfg: one(vrfRoute("a", "red", 1, "", items("10.0.0.0/16 le 8"), nil)),
			wantIs: frr.ErrInvalidConfig, wantErr: "spec.import[0].le 8 must be from the prefix length 16 to 32"},
		{name: "ge beyond the family", cfg: one(vrfRoute("a", "red", 1, "", items("10.0.0.0/16 ge 33"), nil)),
			wantIs: frr.ErrInvalidConfig, wantErr: "spec.import[0].ge 33 must be from the prefix length 16 to 32"},
		{name: "unusable routing table", cfg: one(&sluicev1.Intent{Name: "t", Spec: &sluicev1.Intent_RoutingTable{RoutingTable: &sluicev1.RoutingTable{TableId: 254}}}),
			wantIs: hostnet.ErrInvalidConfig, wantErr: "routing table t"},
		{name: "settings without an ASN", cfg: one(), edit: func(s *frr.Settings) { s.ASN = 0 },
			wantIs: frr.ErrInvalidSettings, wantErr: "asn: is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := settings()
			if tc.edit != nil {
				tc.edit(&s)
			}
			out, err := frr.Render(tc.cfg, s)
			if !errors.Is(err, tc.wantIs) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Render = %q, %v; want an error matching %v containing %q", out, err, tc.wantIs, tc.wantErr)
			}
		})
	}
}

func TestSettings_Validate(t *testing.T) {
	addr := netip.MustParseAddr
	for _, tc := range []struct {
		name    string
		edit    func(*frr.Settings)
		wantErr string // "" = valid
	}{
		{name: "valid", edit: func(*frr.Settings) {}},
		{name: "named cluster VRF", edit: func(s *frr.Settings) { s.ClusterVRF = "cluster" }},
		{name: "no ASN", edit: func(s *frr.Settings) { s.ASN = 0 }, wantErr: "asn: is required"},
		{name: "no router id", edit: func(s *frr.Settings) { s.RouterID = netip.Addr{} }, wantErr: "routerId: is required"},
		{name: "IPv6 router id", edit: func(s *frr.Settings) { s.RouterID = addr("2001:db8::1") }, wantErr: "routerId: 2001:db8::1 is not a unicast IPv4 address"},
		{name: "neighbour without address or interface", edit: func(s *frr.Settings) { s.Neighbors[0].Address = netip.Addr{} },
			wantErr: "neighbors[0]: one of address and interface is required"},
		{name: "neighbour with both", edit: func(s *frr.Settings) { s.Neighbors[2].Address = addr("192.0.2.9") },
			wantErr: "neighbors[2]: give address or interface, not both"},
		{name: "neighbour interface name too long", edit: func(s *frr.Settings) { s.Neighbors[2].Interface = "a-very-long-interface" },
			wantErr: "neighbors[2].interface:"},
		{name: "multicast neighbour", edit: func(s *frr.Settings) { s.Neighbors[0].Address = addr("224.0.0.5") },
			wantErr: "neighbors[0].address: 224.0.0.5 is not a unicast address"},
		{name: "link-local neighbour with zone", edit: func(s *frr.Settings) { s.Neighbors[0].Address = addr("fe80::1%eth0") },
			wantErr: "neighbors[0].address:"},
		{name: "no remote AS", edit: func(s *frr.Settings) { s.Neighbors[1].RemoteAS = "" }, wantErr: "neighbors[1].remoteAS: is required"},
		{name: "remote AS not a number", edit: func(s *frr.Settings) { s.Neighbors[1].RemoteAS = "ebgp" },
			wantErr: `neighbors[1].remoteAS: "ebgp" is not an ASN 1-4294967295, "external" or "internal"`},
		{name: "remote AS too large", edit: func(s *frr.Settings) { s.Neighbors[1].RemoteAS = "4294967296" }, wantErr: "neighbors[1].remoteAS:"},
		{name: "neighbour twice", edit: func(s *frr.Settings) { s.Neighbors = append(s.Neighbors, s.Neighbors[0]) },
			wantErr: "neighbors[3]: 192.0.2.254 is neighbors[0] again"},
		{name: "cluster VRF with vrfs off", edit: func(s *frr.Settings) { s.ClusterVRF = "cluster"; s.VRFs = hostnet.VRFsOff },
			wantErr: "clusterVRF: \"cluster\" needs kernel VRFs"},
		{name: "cluster VRF with sluice's prefix", edit: func(s *frr.Settings) { s.ClusterVRF = "vrf-cluster" },
			wantErr: `clusterVRF: "vrf-cluster" has the prefix "vrf-"`},
		{name: "cluster VRF with a space", edit: func(s *frr.Settings) { s.ClusterVRF = "a b" }, wantErr: "clusterVRF:"},
		{name: "unknown VRF mode", edit: func(s *frr.Settings) { s.VRFs = "netns" }, wantErr: `vrfs: "netns" is not "kernel" or "off"`},
		{name: "VRF table base in the kernel's tables", edit: func(s *frr.Settings) { s.VRFTableBase = 200 }, wantErr: "vrfTableBase: 200 is outside"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := settings()
			tc.edit(&s)
			err := s.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Validate = %v; want nil", err)
			case tc.wantErr != "" && (!errors.Is(err, frr.ErrInvalidSettings) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Validate = %v; want ErrInvalidSettings containing %q", err, tc.wantErr)
			}
		})
	}
}

// manyRoutes is n VRF routes split over vrfs VRFs (v0, v1, …; sequences 1,
// 2, … in each), each importing (or, with export, exporting) one IPv4
// prefix and, every tenth, one IPv6 prefix.
func manyRoutes(n, vrfs int, export bool) *sluicev1.NodeConfig {
	cfg := &sluicev1.NodeConfig{}
	for i := range n {
		v, seq := i%vrfs, uint32(i/vrfs+1)
		its := items(fmt.Sprintf("10.%d.%d.0/24", i/256%256, i%256))
		if i%10 == 0 {
			its = append(its, items(fmt.Sprintf("2001:db8:%x::/48", i))...)
		}
		imp, exp := its, []*sluicev1.PrefixItem(nil)
		if export {
			imp, exp = nil, its
		}
		cfg.Intents = append(cfg.Intents, vrfRoute(fmt.Sprintf("r%d", i), fmt.Sprintf("v%d", v), seq, "", imp, exp))
	}
	return cfg
}

// Route map entries sluice numbers itself (10, 20, …) must stay within
// FRR's 1-65535: Render refuses the config naming the first route past
// it, instead of leaving it to FRR's parser ("% Unknown command: route-map
// sluice_import_v4 permit 65540").
func TestRender_RouteMapEntryPastFRRsLargest_Refused(t *testing.T) {
	off := settings()
	off.VRFs = hostnet.VRFsOff
	for _, tc := range []struct {
		name    string
		cfg     *sluicev1.NodeConfig
		s       frr.Settings
		wantErr string // "" = rendered, with line last
		last    string
	}{
		{name: "vrfs off: 6553 routes with IPv4 imports fit", cfg: manyRoutes(6553, 2, false), s: off,
			last: "route-map sluice_import_v4 permit 65530\n"},
		// Sorted by sequence, VRF breaking ties: r0 (v0, 1), r1 (v1, 1), …;
		// the 6554th is r6553, in v1 with sequence 3277.
		{name: "vrfs off: the 6554th route with IPv4 imports, over two VRFs", cfg: manyRoutes(6554, 2, false), s: off,
			wantErr: "VRF route r6553 (VRF v1, sequence 3277): spec.import's IPv4 items would be entry 65540 of route map sluice_import_v4, past FRR's largest entry 65535: with vrfs: off one map holds every VRF's routes, numbered 10, 20, …, so at most 6553 VRF routes on a node may have IPv4 import items (this config has 6554)"},
		{name: "vrfs off: exports too", cfg: manyRoutes(6560, 3, true), s: off,
			wantErr: "spec.export's IPv4 items would be entry 65540 of route map sluice_export_v4"},
		// Only 656 routes have IPv6 items: their map fits.
		{name: "vrfs off: IPv6 entries counted apart", cfg: manyRoutes(6553, 1, false), s: off,
			last: "route-map sluice_import_v6 permit 6560\n"},
		{name: "kernel VRFs: a route map per VRF, 6554 routes in one fit", cfg: manyRoutes(6554, 1, false), s: settings(),
			last: "route-map sluice_v0_import_v4 permit 6554\n"},
		// VRFs in name order: v0, v1, v10, v100, v1000, v1001, …, v999 last.
		{name: "kernel VRFs: the 6554th VRF exporting IPv4", cfg: manyRoutes(6554, 6554, true), s: settings(),
			wantErr: "VRF route r999 (VRF v999, sequence 1): spec.export's IPv4 items would make its VRF entry 65540 of route map sluice_import_v4, past FRR's largest entry 65535"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := frr.Render(tc.cfg, tc.s)
			if tc.wantErr != "" {
				if !errors.Is(err, frr.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Render: err = %v; want ErrInvalidConfig containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if !strings.Contains(out, tc.last) {
				t.Errorf("output lacks %q", tc.last)
			}
		})
	}
}
