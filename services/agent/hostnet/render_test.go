package hostnet_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent/hostnet"
)

var (
	vtep1   = netip.MustParseAddr("192.0.2.1")
	vtep2   = netip.MustParseAddr("192.0.2.2")
	anycast = hostnet.DefaultAnycastMAC
)

// baseHost is a host with VTEP 192.0.2.1 on eth0, flood peers 192.0.2.1-2
// and its own address 10.10.0.11/24 in VLAN 10, kernel VRFs.
func baseHost() hostnet.Host {
	return hostnet.Host{
		Uplink: "eth0", VTEPAddress: vtep1, FloodPeers: []netip.Addr{vtep1, vtep2},
		NodeAddresses: map[uint32]netip.Prefix{10: netip.MustParsePrefix("10.10.0.11/24")},
	}
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// The links one layer2 network gives on baseHost, by name.
func vxlan10() hostnet.Link {
	return hostnet.Link{
		Name: "sl.v10", Kind: hostnet.KindVXLAN, VNI: 100, Port: 4789, Local: vtep1, Dev: "eth0",
		MTU: 1500, Master: "br.v10", Up: true, FDB: []hostnet.FDBEntry{{MAC: "00:00:00:00:00:00", Dst: vtep2}},
	}
}

func bridge10() hostnet.Link {
	return hostnet.Link{
		Name: "br.v10", Kind: hostnet.KindBridge, MTU: 1500, ARPStrict: true, Master: "vrf-red", Up: true,
		Addrs: []hostnet.Addr{{Prefix: pfx("10.10.0.11/24")}},
		FDB:   []hostnet.FDBEntry{{MAC: anycast}},
	}
}

func gateway10() hostnet.Link {
	return hostnet.Link{
		Name: "gw.v10", Kind: hostnet.KindMacvlan, Parent: "br.v10", MTU: 1500, HardwareAddr: anycast, ARPStrict: true,
		Master: "vrf-red", Up: true,
		Addrs: []hostnet.Addr{{Prefix: pfx("10.10.0.1/24"), NoPrefixRoute: true}, {Prefix: pfx("fd00:10::1/64")}},
	}
}

func vrfRed() hostnet.Link {
	return hostnet.Link{Name: "vrf-red", Kind: hostnet.KindVRF, Table: 75596, Up: true}
}

// with returns l changed by f.
func with(l hostnet.Link, f func(*hostnet.Link)) hostnet.Link {
	f(&l)
	return l
}

func TestRender(t *testing.T) {
	red10 := l2("ten", 10, 100, 0, "red", "10.10.0.1/24", "fd00:10::1/64")
	tests := []struct {
		name  string
		given *sluicev1.NodeConfig
		host  func(*hostnet.Host)
		want  []hostnet.Link
	}{
		{
			name: "empty config", given: config(), want: nil,
		},
		{
			name:  "layer2 network with IPv4 and IPv6 gateways in a VRF",
			given: config(red10),
			want:  []hostnet.Link{bridge10(), gateway10(), vxlan10(), vrfRed()},
		},
		{
			name:  "vrfs off: no VRF device, nothing enslaved to one",
			given: config(red10),
			host:  func(h *hostnet.Host) { h.VRFs = hostnet.VRFsOff },
			want: []hostnet.Link{
				with(bridge10(), func(l *hostnet.Link) { l.Master = "" }),
				with(gateway10(), func(l *hostnet.Link) { l.Master = "" }),
				vxlan10(),
			},
		},
		{
			name:  "no gateways: no gateway device and no anycast FDB entry",
			given: config(l2("ten", 10, 100, 9000, "", nil...)),
			want: []hostnet.Link{
				with(bridge10(), func(l *hostnet.Link) { l.Master, l.MTU, l.FDB = "", 9000, nil }),
				with(vxlan10(), func(l *hostnet.Link) { l.MTU = 9000 }),
			},
		},
		{
			name:  "no node address: the gateway routes its prefix",
			given: config(red10),
			host:  func(h *hostnet.Host) { h.NodeAddresses = nil },
			want: []hostnet.Link{
				with(bridge10(), func(l *hostnet.Link) { l.Addrs = nil }),
				with(gateway10(), func(l *hostnet.Link) { l.Addrs[0].NoPrefixRoute = false }),
				vxlan10(), vrfRed(),
			},
		},
		{
			name:  "node address in another subnet: the gateway routes its prefix",
			given: config(red10),
			host: func(h *hostnet.Host) {
				h.NodeAddresses = map[uint32]netip.Prefix{10: pfx("10.99.0.11/24")}
			},
			want: []hostnet.Link{
				with(bridge10(), func(l *hostnet.Link) { l.Addrs = []hostnet.Addr{{Prefix: pfx("10.99.0.11/24")}} }),
				with(gateway10(), func(l *hostnet.Link) { l.Addrs[0].NoPrefixRoute = false }),
				vxlan10(), vrfRed(),
			},
		},
		{
			name:  "IPv6 node address covers the IPv6 gateway",
			given: config(red10),
			host: func(h *hostnet.Host) {
				h.NodeAddresses = map[uint32]netip.Prefix{10: pfx("fd00:10::11/64")}
			},
			want: []hostnet.Link{
				with(bridge10(), func(l *hostnet.Link) { l.Addrs = []hostnet.Addr{{Prefix: pfx("fd00:10::11/64")}} }),
				with(gateway10(), func(l *hostnet.Link) {
					l.Addrs = []hostnet.Addr{{Prefix: pfx("10.10.0.1/24")}, {Prefix: pfx("fd00:10::1/64"), NoPrefixRoute: true}}
				}),
				vxlan10(), vrfRed(),
			},
		},
		{
			name:  "host parameters: port, MAC, no uplink, no flood peers",
			given: config(red10),
			host: func(h *hostnet.Host) {
				h.Uplink, h.VXLANPort, h.AnycastMAC, h.FloodPeers = "", 8472, "02:AA:00:00:00:01", nil
			},
			want: []hostnet.Link{
				with(bridge10(), func(l *hostnet.Link) { l.FDB = []hostnet.FDBEntry{{MAC: "02:aa:00:00:00:01"}} }),
				with(gateway10(), func(l *hostnet.Link) { l.HardwareAddr = "02:aa:00:00:00:01" }),
				with(vxlan10(), func(l *hostnet.Link) { l.Dev, l.Port, l.FDB = "", 8472, nil }),
				vrfRed(),
			},
		},
		{
			name: "a routing table of the VRF's name gives its table; other routing tables get tbl devices",
			given: config(
				l2("ten", 10, 100, 0, "red", nil...), table("red", 100), table("other", 200),
				route("leak", "blue", 10, "", nil, nil),
			),
			host: func(h *hostnet.Host) { h.TableOffset = 1000; h.NodeAddresses = nil; h.FloodPeers = nil },
			want: []hostnet.Link{
				with(bridge10(), func(l *hostnet.Link) { l.Addrs, l.FDB = nil, nil }),
				with(vxlan10(), func(l *hostnet.Link) { l.FDB = nil }),
				{Name: "tbl.200", Kind: hostnet.KindVRF, Table: 1200, Up: true},
				{Name: "vrf-blue", Kind: hostnet.KindVRF, Table: 60541, Up: true},
				with(vrfRed(), func(l *hostnet.Link) { l.Table = 1100 }),
			},
		},
		{
			name:  "VRF table base",
			given: config(l2("ten", 10, 100, 0, "red", nil...)),
			host:  func(h *hostnet.Host) { h.VRFTableBase = 20000; h.NodeAddresses = nil },
			want: []hostnet.Link{
				with(bridge10(), func(l *hostnet.Link) { l.Addrs, l.FDB = nil, nil }),
				vxlan10(),
				with(vrfRed(), func(l *hostnet.Link) { l.Table = 85596 }),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := baseHost()
			if tt.host != nil {
				tt.host(&h)
			}
			got, err := hostnet.Render(tt.given, h)
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if !reflect.DeepEqual(got.Links, tt.want) {
				t.Fatalf("Render links:\n%s", linkDiff(got.Links, tt.want))
			}
		})
	}
}

func TestRender_Errors(t *testing.T) {
	tests := []struct {
		name    string
		given   *sluicev1.NodeConfig
		host    func(*hostnet.Host)
		wantErr string
	}{
		{
			name:    "two VRFs on one table",
			given:   config(l2("ten", 10, 100, 0, "red", nil...), table("x", 75596)),
			wantErr: "VRF red and routing table x both want kernel table 75596",
		},
		{
			name:    "two routing tables on one table",
			given:   config(table("a", 7), table("b", 7)),
			wantErr: "routing table a and routing table b both want kernel table 7",
		},
		{
			name:    "table offset lands on a kernel table",
			given:   config(table("a", 250)),
			host:    func(h *hostnet.Host) { h.TableOffset = 4 },
			wantErr: "routing table a: table id 250 + tableOffset 4 = 254 is not a usable kernel table",
		},
		{
			name:    "gateway not in CIDR form",
			given:   config(l2("ten", 10, 100, 0, "red", "10.10.0.1")),
			wantErr: `layer2 network ten: anycast gateway "10.10.0.1" is not an address in CIDR form`,
		},
		{
			name:    "node address is the gateway",
			given:   config(l2("ten", 10, 100, 0, "red", "10.10.0.11/24")),
			wantErr: "layer2 network ten: nodeAddresses[10] 10.10.0.11/24 is its anycast gateway",
		},
		{
			name:    "one VLAN twice",
			given:   config(l2("a", 10, 100, 0, "", nil...), l2("b", 10, 200, 0, "", nil...)),
			wantErr: "layer2 networks a and b both use VLAN 10",
		},
		{
			name:    "one VNI twice",
			given:   config(l2("a", 10, 100, 0, "", nil...), l2("b", 20, 100, 0, "", nil...)),
			wantErr: "layer2 networks a and b both use VNI 100",
		},
		{
			name: "one sequence twice in a VRF",
			given: config(route("a", "red", 10, "", nil, nil), route("b", "red", 10, "", nil, nil),
				route("c", "blue", 10, "", nil, nil)),
			wantErr: "VRF routes a and b both have sequence 10 in VRF red",
		},
		{
			name:    "prefix not in CIDR form",
			given:   config(route("a", "red", 10, "", []*sluicev1.PrefixItem{prefix("10.0.0.0", 0, 0)}, nil)),
			wantErr: `VRF route a: import[0]: "10.0.0.0" is not a prefix`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := baseHost()
			if tt.host != nil {
				tt.host(&h)
			}
			_, err := hostnet.Render(tt.given, h)
			if !errors.Is(err, hostnet.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Render error = %v, want ErrInvalidConfig with %q", err, tt.wantErr)
			}
		})
	}
}

func TestRender_InvalidHost(t *testing.T) {
	_, err := hostnet.Render(config(), hostnet.Host{})
	if !errors.Is(err, hostnet.ErrInvalidHost) {
		t.Fatalf("Render error = %v, want ErrInvalidHost", err)
	}
}

func TestRender_IntentOrderDoesNotMatter(t *testing.T) {
	intents := []*sluicev1.Intent{
		l2("ten", 10, 100, 0, "red", "10.10.0.1/24", "fd00:10::1/64"),
		l2("twenty", 20, 200, 9000, "blue", "10.20.0.1/24"),
		l2("thirty", 30, 300, 0, "", nil...),
		table("red", 100), table("other", 300),
		route("b", "red", 20, "65000:2", []*sluicev1.PrefixItem{prefix("10.30.0.0/16", 24, 32), prefix("10.20.0.0/16", 0, 24)}, nil),
		route("a", "red", 10, "", nil, []*sluicev1.PrefixItem{prefix("10.10.0.0/16", 0, 0)}),
	}
	want, err := hostnet.Render(config(intents...), baseHost())
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		shuffled := append([]*sluicev1.Intent(nil), intents...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		got, err := hostnet.Render(config(shuffled...), baseHost())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Render of shuffled intents differs:\n%s", linkDiff(got.Links, want.Links))
		}
	}
}

func TestRender_RoutingDocument(t *testing.T) {
	cfg := config(
		l2("ten", 10, 100, 0, "red", "10.10.0.1/24"),
		table("red", 100),
		route("second", "red", 20, "65000:2", []*sluicev1.PrefixItem{
			prefix("10.30.0.0/16", 24, 32), prefix("10.20.0.1/16", 0, 24), prefix("10.30.0.0/16", 24, 32),
		}, nil),
		route("first", "red", 10, "", nil, []*sluicev1.PrefixItem{prefix("fd00:10::/48", 0, 0), prefix("10.10.0.0/16", 0, 0)}),
		route("blue-only", "blue", 5, "", nil, nil),
	)
	want := `{
  "version": 1,
  "vrfs": [
    {
      "name": "blue",
      "device": "vrf-blue",
      "table": 60541,
      "routeMaps": [
        {
          "intent": "blue-only",
          "sequence": 5,
          "import": [],
          "export": []
        }
      ]
    },
    {
      "name": "red",
      "device": "vrf-red",
      "table": 100,
      "routeMaps": [
        {
          "intent": "first",
          "sequence": 10,
          "import": [],
          "export": [
            {
              "prefix": "10.10.0.0/16"
            },
            {
              "prefix": "fd00:10::/48"
            }
          ]
        },
        {
          "intent": "second",
          "sequence": 20,
          "community": "65000:2",
          "import": [
            {
              "prefix": "10.20.0.0/16",
              "le": 24
            },
            {
              "prefix": "10.30.0.0/16",
              "ge": 24,
              "le": 32
            }
          ],
          "export": []
        }
      ]
    }
  ]
}
`
	d, err := hostnet.Render(cfg, baseHost())
	if err != nil {
		t.Fatal(err)
	}
	if got := string(d.Routing.Marshal()); got != want {
		t.Fatalf("routing document:\n%s\nwant:\n%s", got, want)
	}

	off := baseHost()
	off.VRFs = hostnet.VRFsOff
	d, err = hostnet.Render(cfg, off)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range d.Routing.VRFs {
		if v.Device != "" || v.Table != 254 {
			t.Errorf("vrfs off: VRF %s has device %q table %d, want no device and the main table 254", v.Name, v.Device, v.Table)
		}
	}
}

// linkDiff describes how got differs from want, link by link.
func linkDiff(got, want []hostnet.Link) string {
	var b strings.Builder
	for i := 0; i < max(len(got), len(want)); i++ {
		var g, w any = "(none)", "(none)"
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if !reflect.DeepEqual(g, w) {
			fmt.Fprintf(&b, "link %d:\n   got %+v\n  want %+v\n", i, g, w)
		}
	}
	return b.String()
}
