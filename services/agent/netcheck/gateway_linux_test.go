package netcheck_test

import (
	"context"
	"errors"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/agent/netcheck"
)

// layer2 is an applied config with the layer2 network name on vlan, its
// gateways routed in VRF vrf.
func layer2(name string, vlan uint32, vrf string, gateways ...string) *sluicev1.DesiredConfig {
	return &sluicev1.DesiredConfig{Node: "n1", Config: &sluicev1.NodeConfig{Intents: []*sluicev1.Intent{{
		Name: name,
		Spec: &sluicev1.Intent_Layer2Network{Layer2Network: &sluicev1.Layer2Network{
			Vlan: vlan, Vni: 10000 + vlan, AnycastGateways: gateways, Vrf: vrf,
		}},
	}}}}
}

// tenantA is the config of the test LAN: VLAN 100 with both gateways.
func tenantA() *sluicev1.DesiredConfig { return layer2("tenant-a", 100, "tenant-a", gw4, gw6) }

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

// wait is the reply wait of the tests' pings: long for a veth, short for
// the tests that expect silence.
const wait = 300 * time.Millisecond

func TestGateway_TargetsThatAnswer_Pass(t *testing.T) {
	l := newLAN(t)
	c := netcheck.Gateway{Targets: map[uint32][]netip.Addr{100: addrs("10.100.0.12", "fd00:100::12"), 300: addrs("10.3.0.1")}, Wait: wait}
	out, err := runCheck(t, l.node, c, tenantA(), 5*time.Second)
	wantResult(t, out, err, nil, "",
		"vlan 100 (tenant-a): bridge br.v100 up; gateways 10.100.0.1/24, fd00:100::1/64 on br.v100; node addresses 10.100.0.11/24, fd00:100::11/64; pinging bound to br.v100 (no VRF device vrf-tenant-a)",
		"vlan 100 (tenant-a): 10.100.0.12 from 10.100.0.11: reply in",
		"vlan 100 (tenant-a): fd00:100::12 from fd00:100::11: reply in",
		"vlan 300: not in the applied config on this node; 10.3.0.1 not pinged")
	if want := "gateway: 100=10.100.0.12,fd00:100::12 300=10.3.0.1"; c.Name() != want {
		t.Errorf("Name() = %q, want %q", c.Name(), want)
	}
}

func TestGateway_TargetThatDoesNotAnswer_FailsNamingIt(t *testing.T) {
	tests := []struct {
		name     string
		macvlan  bool // the gateways on gw.v100
		given    func(t *testing.T, l *lan)
		targets  []netip.Addr
		wantKind error
		wantErr  string
		wantOut  []string
	}{
		{
			name:     "the peer's address is removed",
			given:    func(t *testing.T, l *lan) { l.peer.delAddr(t, peerLink, peer4) },
			targets:  addrs("10.100.0.12", "fd00:100::12"),
			wantKind: netcheck.ErrNoReply,
			wantErr:  "vlan 100 (tenant-a): 10.100.0.12 from 10.100.0.11: no reply within 300ms",
			wantOut:  []string{"fd00:100::12 from fd00:100::11: reply in"},
		},
		{
			name:     "the peer's link is down",
			given:    func(t *testing.T, l *lan) { l.peer.down(t, peerLink) },
			targets:  addrs("10.100.0.12", "fd00:100::12"),
			wantKind: netcheck.ErrNoReply,
			wantErr:  "vlan 100 (tenant-a): 10.100.0.12 from 10.100.0.11: no reply within 300ms (and 1 more failures, see the output)",
			wantOut:  []string{"vlan 100 (tenant-a): fd00:100::12 from fd00:100::11: no reply within 300ms"},
		},
		{
			name:     "the bridge's port is down",
			given:    func(t *testing.T, l *lan) { l.node.down(t, bridgePort) },
			targets:  addrs("fd00:100::12"),
			wantKind: netcheck.ErrNoReply,
			wantErr:  "vlan 100 (tenant-a): fd00:100::12 from fd00:100::11: no reply within 300ms",
		},
		{
			name:     "the node has no address of its own in the network",
			macvlan:  true,
			given:    func(t *testing.T, l *lan) { l.node.delAddr(t, bridge, node4) },
			targets:  addrs("10.100.0.12", "fd00:100::12"),
			wantKind: netcheck.ErrAddressMissing,
			wantErr:  "vlan 100 (tenant-a): 10.100.0.12: no node address of its family on br.v100 to send from (the anycast gateways 10.100.0.1/24, fd00:100::1/64 cannot be a source)",
			wantOut:  []string{"fd00:100::12 from fd00:100::11: reply in"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := buildLAN(t, lanLayout{macvlan: tt.macvlan})
			tt.given(t, l)
			c := netcheck.Gateway{Targets: map[uint32][]netip.Addr{100: tt.targets}, Wait: wait}
			out, err := runCheck(t, l.node, c, tenantA(), 5*time.Second)
			wantResult(t, out, err, tt.wantKind, tt.wantErr, tt.wantOut...)
		})
	}
}

func TestGateway_BridgeOrGatewayNotInPlace_Fails(t *testing.T) {
	tests := []struct {
		name     string
		macvlan  bool // the gateways on gw.v100
		given    func(t *testing.T, l *lan)
		config   *sluicev1.DesiredConfig
		wantKind error
		wantErr  string
	}{
		{
			name:     "no bridge for the network",
			config:   layer2("tenant-b", 200, "tenant-b", "10.200.0.1/24"),
			wantKind: netcheck.ErrLinkMissing,
			wantErr:  "vlan 200 (tenant-b): bridge br.v200 does not exist",
		},
		{
			name:     "the bridge is down",
			given:    func(t *testing.T, l *lan) { l.node.down(t, bridge) },
			wantKind: netcheck.ErrLinkDown,
			wantErr:  "vlan 100 (tenant-a): bridge br.v100 is down",
		},
		{
			name:     "a gateway address is missing",
			given:    func(t *testing.T, l *lan) { l.node.delAddr(t, bridge, gw4) },
			wantKind: netcheck.ErrAddressMissing,
			wantErr:  "vlan 100 (tenant-a): gateway 10.100.0.1/24 is not on br.v100 nor on a macvlan on it (br.v100 has ",
		},
		{
			name:     "a gateway has another prefix length",
			config:   layer2("tenant-a", 100, "tenant-a", "10.100.0.1/25", gw6),
			wantKind: netcheck.ErrAddressMissing,
			wantErr:  "vlan 100 (tenant-a): gateway 10.100.0.1/25 is on br.v100 as 10.100.0.1/24",
		},
		{
			name:     "the gateways' macvlan is down",
			macvlan:  true,
			given:    func(t *testing.T, l *lan) { l.node.down(t, gwDevice) },
			wantKind: netcheck.ErrAddressMissing,
			// The kernel drops IPv6 addresses from a link that goes down.
			wantErr: "vlan 100 (tenant-a): gateway 10.100.0.1/24 is on gw.v100, which is down; gateway fd00:100::1/64 is not on br.v100 nor on a macvlan on it",
		},
		{
			name:     "a gateway is not in CIDR form",
			config:   layer2("tenant-a", 100, "tenant-a", "10.100.0.1"),
			wantKind: nil, // not a host problem: reported, not matched to a kind
			wantErr:  `vlan 100 (tenant-a): anycast gateway "10.100.0.1" is not an address in CIDR form`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := buildLAN(t, lanLayout{macvlan: tt.macvlan})
			if tt.given != nil {
				tt.given(t, l)
			}
			cfg := tt.config
			if cfg == nil {
				cfg = tenantA()
			}
			c := netcheck.Gateway{Targets: map[uint32][]netip.Addr{100: addrs("10.100.0.12"), 200: addrs("10.200.0.12")}, Wait: wait}
			out, err := runCheck(t, l.node, c, cfg, 5*time.Second)
			switch {
			case err == nil || !strings.Contains(err.Error(), tt.wantErr):
				t.Errorf("err = %v, want one containing %q", err, tt.wantErr)
			case tt.wantKind != nil && !errors.Is(err, tt.wantKind):
				t.Errorf("err = %v, want one matching %v", err, tt.wantKind)
			}
			if !strings.Contains(out, tt.wantErr) || !strings.Contains(out, "not pinged") {
				t.Errorf("output does not name the failure and the targets not pinged:\n%s", out)
			}
		})
	}
}

func TestGateway_WithoutTargets_PingsTheGatewaysLocally(t *testing.T) {
	tests := []struct {
		name    string
		macvlan bool // the gateways on gw.v100
		given   func(t *testing.T, l *lan)
		wantOut []string
	}{
		{
			name: "gateways on the bridge",
			wantOut: []string{
				"pinging in the main routing table (no VRF device vrf-tenant-a)",
				"vlan 100 (tenant-a): gateway 10.100.0.1 from 10.100.0.11: reply in",
				"vlan 100 (tenant-a): gateway fd00:100::1 from fd00:100::11: reply in",
			},
		},
		{
			name:    "gateways on a macvlan on the bridge",
			macvlan: true,
			wantOut: []string{
				"gateways 10.100.0.1/24, fd00:100::1/64 on gw.v100; node addresses 10.100.0.11/24, fd00:100::11/64",
				"vlan 100 (tenant-a): gateway 10.100.0.1 from 10.100.0.11: reply in",
				"vlan 100 (tenant-a): gateway fd00:100::1 from fd00:100::11: reply in",
			},
		},
		{
			name:    "no node address: the kernel picks the source",
			macvlan: true,
			given: func(t *testing.T, l *lan) {
				l.node.delAddr(t, bridge, node4)
				l.node.delAddr(t, bridge, node6)
			},
			wantOut: []string{
				"node addresses none",
				"vlan 100 (tenant-a): gateway 10.100.0.1: reply in",
				"vlan 100 (tenant-a): gateway fd00:100::1: reply in",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := buildLAN(t, lanLayout{macvlan: tt.macvlan})
			if tt.given != nil {
				tt.given(t, l)
			}
			out, err := runCheck(t, l.node, netcheck.Gateway{Wait: wait}, tenantA(), 5*time.Second)
			wantResult(t, out, err, nil, "", tt.wantOut...)
		})
	}
}

func TestGateway_InsideTheVRFDevice(t *testing.T) {
	targets := map[uint32][]netip.Addr{100: addrs("10.100.0.12", "fd00:100::12")}
	t.Run("bridge in the VRF: pings from inside it", func(t *testing.T) {
		for _, layout := range []lanLayout{{vrf: true}, {vrf: true, macvlan: true}} {
			l := buildLAN(t, layout)
			for _, c := range []netcheck.Gateway{{Wait: wait}, {Targets: targets, Wait: wait}} {
				out, err := runCheck(t, l.node, c, tenantA(), 5*time.Second)
				wantResult(t, out, err, nil, "", "pinging inside vrf-tenant-a", "reply in")
			}
		}
	})
	t.Run("bridge outside the VRF: fails", func(t *testing.T) {
		l := newLAN(t)
		l.node.addVRF(t, vrfDevice, 10)
		out, err := runCheck(t, l.node, netcheck.Gateway{Targets: targets, Wait: wait}, tenantA(), 5*time.Second)
		wantResult(t, out, err, netcheck.ErrNotInVRF, "vlan 100 (tenant-a): br.v100 is not in vrf-tenant-a, the device of vrf tenant-a")
	})
}

func TestGateway_StopsWhenItsContextEnds(t *testing.T) {
	l := newLAN(t)
	c := netcheck.Gateway{Targets: map[uint32][]netip.Addr{100: addrs("10.100.0.99")}, Wait: time.Minute}
	// Margin: the context's 3s outlasts the check's preamble on a cold,
	// loaded machine (it took over 200ms once), and the minute-long wait it
	// cuts short stays far above the 30s bound below.
	const timeout = 3 * time.Second
	start := time.Now()
	out, err := runCheck(t, l.node, c, tenantA(), timeout)
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("took %s with a %s context and a minute's wait", took, timeout)
	}
	wantResult(t, out, err, netcheck.ErrNoReply, "10.100.0.99 from 10.100.0.11: no reply within ")
	// The wait said is the context's, less the moment the check took to start.
	if err != nil {
		m := regexp.MustCompile(`no reply within (\S+)$`).FindStringSubmatch(err.Error())
		if m == nil {
			t.Fatalf("err = %q, want it to end with the wait", err)
		}
		if d, perr := time.ParseDuration(m[1]); perr != nil || d <= 0 || d > timeout {
			t.Errorf("err = %q, want a wait in (0, %s]: the context's, not the minute", err, timeout)
		}
	}
}

func TestGateway_NoGatewaysInTheConfig_Passes(t *testing.T) {
	for _, cfg := range []*sluicev1.DesiredConfig{nil, layer2("plain", 100, "")} {
		out, err := netcheck.Gateway{}.Run(context.Background(), agent.CheckEnv{Config: cfg})
		wantResult(t, out, err, nil, "", "no layer2 network with anycast gateways in the applied config")
	}
}
