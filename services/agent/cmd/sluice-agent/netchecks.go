package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/agent/netcheck"
)

// netCheckFlags are the command line's built-in network checks
// (package netcheck).
type netCheckFlags struct {
	gateway        bool
	gatewayTargets multi
	peers          multi
	uplinks        multi
}

// register adds --check-gateway, --check-gateway-target, --check-peer and
// --check-uplink to fs.
func (f *netCheckFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.gateway, "check-gateway", false,
		"health check: each applied layer2 network's bridge br.v<vlan> is up with its anycast gateways, which answer a ping inside their VRF")
	fs.Var(&f.gatewayTargets, "check-gateway-target",
		"health check (repeatable; implies --check-gateway): VLAN=ADDR[,ADDR...]: ping each ADDR from this node's own address in that network, inside its VRF; a VLAN this node lacks is skipped")
	fs.Var(&f.peers, "check-peer",
		"health check (repeatable): ADDR pings ADDR, ADDR%VRF pings it inside VRF; where ICMP is filtered, tcp://ADDR:PORT[%VRF] connects instead (IPv6: tcp://[ADDR]:PORT); ADDR is an IP address")
	fs.Var(&f.uplinks, "check-uplink",
		"health check (repeatable): network interface exists, is up and has carrier")
}

// specs returns the checks f asks for (see netCheckSpecs).
func (f netCheckFlags) specs(timeout time.Duration, retries int) ([]agent.CheckSpec, error) {
	return netCheckSpecs(f.gateway, f.gatewayTargets, f.peers, f.uplinks, timeout, retries)
}

// netCheckSpecs builds the built-in network checks of the command line,
// each with timeout and retries: one per uplink, then the gateway check
// (when gateway is set or targets are given, all targets in one check),
// then one per peer — the uplinks first, so that a dead link is the failure
// reported rather than what it breaks. Errors name the flag and its value.
func netCheckSpecs(gateway bool, gatewayTargets, peers, uplinks []string, timeout time.Duration, retries int) ([]agent.CheckSpec, error) {
	var specs []agent.CheckSpec
	add := func(flagName, value string, c agent.Check) error {
		s := agent.CheckSpec{Check: c, Timeout: timeout, Retries: retries}
		if err := s.Validate(); err != nil {
			if value == "" {
				return fmt.Errorf("--%s: %w", flagName, err)
			}
			return fmt.Errorf("--%s %s: %w", flagName, value, err)
		}
		specs = append(specs, s)
		return nil
	}
	for _, v := range uplinks {
		if strings.TrimSpace(v) == "" {
			return nil, errors.New("--check-uplink: empty value")
		}
		if err := add("check-uplink", v, netcheck.Uplink{Interface: v}); err != nil {
			return nil, err
		}
	}
	if gateway || len(gatewayTargets) > 0 {
		targets := map[uint32][]netip.Addr{}
		for _, v := range gatewayTargets {
			if err := parseGatewayTarget(v, targets); err != nil {
				return nil, fmt.Errorf("--check-gateway-target %s: %w", v, err)
			}
		}
		flagName, value := "check-gateway", ""
		if len(gatewayTargets) > 0 {
			flagName, value = "check-gateway-target", strings.Join(gatewayTargets, " ")
		}
		if err := add(flagName, value, netcheck.Gateway{Targets: targets}); err != nil {
			return nil, err
		}
	}
	for _, v := range peers {
		if strings.TrimSpace(v) == "" {
			return nil, errors.New("--check-peer: empty value")
		}
		p, err := netcheck.ParsePeer(v)
		if err != nil {
			return nil, fmt.Errorf("--check-peer %s: %w", v, err)
		}
		if err := add("check-peer", v, p); err != nil {
			return nil, err
		}
	}
	return specs, nil
}

// parseGatewayTarget adds VLAN=ADDR[,ADDR...] to targets.
func parseGatewayTarget(v string, targets map[uint32][]netip.Addr) error {
	vlanText, addrs, ok := strings.Cut(v, "=")
	if !ok {
		return errors.New("want VLAN=ADDR[,ADDR...]")
	}
	vlan, err := parseVLAN(vlanText)
	if err != nil {
		return err
	}
	for a := range strings.SplitSeq(addrs, ",") {
		addr, err := parseTarget(a)
		if err != nil {
			return err
		}
		targets[vlan] = append(targets[vlan], addr)
	}
	return nil
}

func parseVLAN(s string) (uint32, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
	if err != nil || n < 1 || n > 4094 {
		return 0, fmt.Errorf("vlan %q is not a number 1-4094", s)
	}
	return uint32(n), nil
}

func parseTarget(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("target %q is not an IP address", s)
	}
	return a, nil
}

// netCheckFields are the built-in network checks of a --config check;
// checkSpec embeds it. Each sets one check:
//
//	checks:
//	- uplink: eth0                              # up with carrier
//	- gateway: {}                               # the gateways are in place and answer in their VRF
//	- gateway: {targets: {100: [10.100.0.12]}}  # and reach these, per VLAN
//	- peer: 10.0.0.5                            # ping; 10.0.0.5%red, or vrf: red, inside a VRF
//	- peer: tcp://10.0.0.5:179                  # connect, where ICMP is filtered
//	  vrf: red
type netCheckFields struct {
	Gateway *gatewayField `json:"gateway"`
	Peer    string        `json:"peer"`
	VRF     string        `json:"vrf"` // peer: the VRF to send in (as ADDR%VRF)
	Uplink  string        `json:"uplink"`
}

// gatewayField is the gateway check of the config file: targets maps a
// VLAN to the addresses to ping in it.
type gatewayField struct {
	Targets map[string][]string `json:"targets"`
}

// checks returns the checks n sets, labelled label, for checkSpec.spec to
// count with the other kinds. Errors name the field.
func (n netCheckFields) checks(label string) ([]agent.Check, error) {
	var out []agent.Check
	if n.Uplink != "" {
		out = append(out, netcheck.Uplink{Label: label, Interface: n.Uplink})
	}
	if n.Gateway != nil {
		g := netcheck.Gateway{Label: label, Targets: map[uint32][]netip.Addr{}}
		for _, vlanText := range slices.Sorted(maps.Keys(n.Gateway.Targets)) {
			vlan, err := parseVLAN(vlanText)
			if err != nil {
				return nil, fmt.Errorf("gateway.targets: %w", err)
			}
			if len(n.Gateway.Targets[vlanText]) == 0 {
				return nil, fmt.Errorf("gateway.targets: vlan %d has no target", vlan)
			}
			for i, a := range n.Gateway.Targets[vlanText] {
				addr, err := parseTarget(a)
				if err != nil {
					return nil, fmt.Errorf("gateway.targets[%s][%d]: %w", vlanText, i, err)
				}
				g.Targets[vlan] = append(g.Targets[vlan], addr)
			}
		}
		out = append(out, g)
	}
	if n.Peer != "" {
		p, err := netcheck.ParsePeer(n.Peer)
		if err != nil {
			return nil, fmt.Errorf("peer: %w", err)
		}
		if n.VRF != "" {
			if p.VRF != "" {
				return nil, fmt.Errorf("vrf: %q given twice, in peer %q and in vrf", n.VRF, n.Peer)
			}
			p.VRF = n.VRF
		}
		p.Label = label
		out = append(out, p)
	} else if n.VRF != "" {
		return nil, errors.New("vrf: only for a peer check")
	}
	return out, nil
}
