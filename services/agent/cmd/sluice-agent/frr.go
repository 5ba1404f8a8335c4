package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice/services/agent"
	"github.com/sluicehq/sluice/services/agent/frr"
	"github.com/sluicehq/sluice/services/agent/hostnet"
)

// frrSection is the --config file's frr section: the node's FRR settings
// (frr.Settings: asn, routerId, neighbors, clusterVRF, and with the FRR
// applier alone vrfs, tableOffset, vrfTableBase) and where FRR is.
type frrSection struct {
	frr.Settings
	// Base is the operator's own FRR config file, kept line for line.
	Base string `json:"base"`
	// Pathspace is the FRR instance (vtysh -N); "" the default one.
	Pathspace string `json:"pathspace"`
	// Settle is how long an apply waits for BGP after a reload.
	Settle duration `json:"settle"`
}

// frrFlags are the FRR applier's settings and the FRR checks as flags;
// each given on the command line wins over the --config file's frr
// section (--frr-neighbor, given at all, replaces its neighbors).
type frrFlags struct {
	asn                                 uint64
	routerID, clusterVRF, base, pathspc string
	neighbors                           multi
	settle                              time.Duration
	checkBGP                            bool
	checkBGPMin                         int
	checkRoutes                         multi
}

func (f *frrFlags) register(fs *flag.FlagSet) {
	fs.Uint64Var(&f.asn, "frr-asn", 0, "FRR applier: this node's BGP AS number (frr.asn)")
	fs.StringVar(&f.routerID, "frr-router-id", "", "FRR applier: the BGP router id, an IPv4 address (frr.routerId)")
	fs.Var(&f.neighbors, "frr-neighbor", "FRR applier (repeatable): ADDR=REMOTEAS, a BGP neighbour of the cluster VRF: ADDR an IP address or an interface (unnumbered), REMOTEAS an AS number, external or internal; replaces frr.neighbors")
	fs.StringVar(&f.clusterVRF, "frr-cluster-vrf", "", "FRR applier: the VRF every tenant VRF leaks to and from (default: the default VRF) (frr.clusterVRF)")
	fs.StringVar(&f.base, "frr-base", "", "FRR applier: the operator's own FRR config, kept line for line; sluice's block is merged into it (frr.base; not the pathspace's own frr.conf, which frr-reload overwrites). Read at start")
	fs.StringVar(&f.pathspc, "frr-pathspace", "", "FRR applier and checks: the FRR instance (vtysh -N NAME, sockets in /var/run/frr/NAME); default the default instance (frr.pathspace)")
	fs.DurationVar(&f.settle, "frr-settle", frr.DefaultSettle, "FRR applier: how long an apply waits after a reload for BGP to apply the new policy, before the checks (frr.settle)")
	fs.BoolVar(&f.checkBGP, "check-bgp", false, "health check: every BGP neighbour of every VRF of the FRR instance (--frr-pathspace) is Established")
	fs.IntVar(&f.checkBGPMin, "check-bgp-min-prefixes", 0, "health check (implies --check-bgp): every BGP neighbour sent at least N prefixes")
	fs.Var(&f.checkRoutes, "check-route", "health check (repeatable): PREFIX[%VRF] is in that VRF's routing table in FRR (--frr-pathspace) and in the kernel, e.g. 203.0.113.0/24 or 10.0.0.0/8%vrf-red")
}

// instance is the FRR instance of the applier and the checks.
func (f *frrFlags) instance(set map[string]bool, sec frrSection) frr.Instance {
	if set["frr-pathspace"] || sec.Pathspace == "" {
		return frr.Instance{Pathspace: f.pathspc}
	}
	return frr.Instance{Pathspace: sec.Pathspace}
}

// settings merges the flags given (set) over the section; with netlink
// set (both appliers run) the VRF and table settings are netlink's.
// Errors name the flag or the field.
func (f *frrFlags) settings(set map[string]bool, sec frrSection, netlink *hostnet.Host, nl *netlinkFlags) (frr.Settings, error) {
	s := sec.Settings
	if set["frr-asn"] {
		if f.asn == 0 || f.asn > 1<<32-1 {
			return s, fmt.Errorf("--frr-asn %d: want 1-4294967295", f.asn)
		}
		s.ASN = uint32(f.asn)
	}
	if set["frr-router-id"] {
		a, err := netip.ParseAddr(f.routerID)
		if err != nil {
			return s, fmt.Errorf("--frr-router-id %q: not an IPv4 address", f.routerID)
		}
		s.RouterID = a
	}
	if len(f.neighbors) > 0 {
		s.Neighbors = nil
		for _, v := range f.neighbors {
			n, err := parseNeighbor(v)
			if err != nil {
				return s, fmt.Errorf("--frr-neighbor %q: %w", v, err)
			}
			s.Neighbors = append(s.Neighbors, n)
		}
	}
	if set["frr-cluster-vrf"] {
		s.ClusterVRF = f.clusterVRF
	}
	if netlink != nil {
		// One home: FRR's VRFs and tables are the devices netlink makes.
		for field, given := range map[string]bool{"vrfs": s.VRFs != "", "tableOffset": s.TableOffset != 0, "vrfTableBase": s.VRFTableBase != 0} {
			if given {
				return s, fmt.Errorf("frr.%s: with --applier netlink,frr it is the netlink settings' (netlink.%s or its flag), the one home of the VRF devices and their tables: remove it from the frr section", field, field)
			}
		}
		s.VRFs, s.TableOffset, s.VRFTableBase = netlink.VRFs, netlink.TableOffset, netlink.VRFTableBase
	} else {
		// The FRR applier alone: the kernel-table flags apply to it.
		if set["vrfs"] {
			s.VRFs = nl.vrfs
		}
		if set["table-offset"] {
			s.TableOffset = uint32(nl.tableOffset)
		}
		if set["vrf-table-base"] {
			s.VRFTableBase = uint32(nl.vrfTableBase)
		}
	}
	if err := s.Validate(); err != nil {
		return s, fmt.Errorf("frr settings (the --config file's frr section and the --frr-* flags): %w", err)
	}
	return s, nil
}

// parseNeighbor reads ADDR=REMOTEAS.
func parseNeighbor(v string) (frr.Neighbor, error) {
	addr, as, ok := strings.Cut(v, "=")
	if !ok || addr == "" || as == "" {
		return frr.Neighbor{}, errors.New("want ADDR=REMOTEAS, e.g. 192.0.2.254=65100, 192.0.2.254=external or eth1=internal")
	}
	n := frr.Neighbor{RemoteAS: as}
	if a, err := netip.ParseAddr(addr); err == nil {
		n.Address = a
	} else {
		n.Interface = addr
	}
	return n, nil
}

// frrApplier builds the FRR applier and checks the host (Preflight): FRR
// installed, the base file neither the pathspace's own frr.conf nor one
// FRR refuses. It returns Preflight's warnings.
func (f *frrFlags) frrApplier(set map[string]bool, sec frrSection, netlink *hostnet.Host, nl *netlinkFlags, stateDir string) (*frr.Applier, []string, error) {
	s, err := f.settings(set, sec, netlink, nl)
	if err != nil {
		return nil, nil, err
	}
	c := frr.ApplierConfig{FRR: f.instance(set, sec), Settings: s, Dir: stateDir, Settle: f.settle}
	if !set["frr-settle"] && sec.Settle > 0 {
		c.Settle = time.Duration(sec.Settle)
	}
	c.BasePath = sec.Base
	if set["frr-base"] {
		c.BasePath = f.base
	}
	if err := frr.CheckBasePath(c.BasePath, c.FRR); err != nil {
		return nil, nil, fmt.Errorf("--frr-base (frr.base): %w", err)
	}
	if c.BasePath != "" {
		b, err := os.ReadFile(c.BasePath)
		if err != nil {
			return nil, nil, fmt.Errorf("--frr-base (frr.base): %w", err)
		}
		c.Base = string(b)
	}
	if c.Hostname, err = os.Hostname(); err != nil {
		return nil, nil, fmt.Errorf("FRR applier: the host's name, which FRR's config must carry: %w", err)
	}
	a, err := frr.NewApplier(c)
	if err != nil {
		return nil, nil, fmt.Errorf("--frr-base (frr.base): %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	warnings, err := a.Preflight(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("--applier frr: %w", err)
	}
	return a, warnings, nil
}

// specs returns the FRR checks of the command line on inst: the BGP check
// (with --check-bgp or --check-bgp-min-prefixes), then one per route.
func (f frrFlags) specs(inst frr.Instance, timeout time.Duration, retries int) ([]agent.CheckSpec, error) {
	var specs []agent.CheckSpec
	if f.checkBGPMin < 0 {
		return nil, fmt.Errorf("--check-bgp-min-prefixes %d: is negative", f.checkBGPMin)
	}
	if f.checkBGP || f.checkBGPMin > 0 {
		specs = append(specs, agent.CheckSpec{Check: frr.BGP{FRR: inst, MinPrefixes: f.checkBGPMin}, Timeout: timeout, Retries: retries})
	}
	for _, v := range f.checkRoutes {
		c, err := frr.ParseRoute(strings.TrimSpace(v), inst)
		if err != nil {
			return nil, fmt.Errorf("--check-route %s: %w", v, err)
		}
		specs = append(specs, agent.CheckSpec{Check: c, Timeout: timeout, Retries: retries})
	}
	return specs, nil
}

// frrCheckFields are the FRR checks of a --config check; checkSpec embeds
// it:
//
//	checks:
//	- bgp: {}                    # every neighbour Established
//	- bgp: {minPrefixes: 2}      # and each sent at least 2 prefixes
//	- route: 203.0.113.0/24      # in FRR's and the kernel's table; PREFIX%VRF in a VRF
type frrCheckFields struct {
	BGP   *bgpField `json:"bgp"`
	Route string    `json:"route"`
	// frr is the instance they check (--frr-pathspace), set before spec.
	frr frr.Instance
}

type bgpField struct {
	MinPrefixes int `json:"minPrefixes"`
}

// checks returns the FRR checks f sets, labelled label.
func (f frrCheckFields) checks(label string) ([]agent.Check, error) {
	var out []agent.Check
	if f.BGP != nil {
		if f.BGP.MinPrefixes < 0 {
			return nil, fmt.Errorf("bgp.minPrefixes: %d is negative", f.BGP.MinPrefixes)
		}
		out = append(out, frr.BGP{Label: label, FRR: f.frr, MinPrefixes: f.BGP.MinPrefixes})
	}
	if f.Route != "" {
		c, err := frr.ParseRoute(f.Route, f.frr)
		if err != nil {
			return nil, fmt.Errorf("route: %w", err)
		}
		c.Label = label
		out = append(out, c)
	}
	return out, nil
}

// applierKinds splits --applier: "netlink,frr" is netlink then FRR.
func applierKinds(kind string) (netlink, withFRR bool, err error) {
	switch strings.ReplaceAll(kind, " ", "") {
	case "netlink":
		return true, false, nil
	case "frr":
		return false, true, nil
	case "netlink,frr":
		return true, true, nil
	case "frr,netlink":
		return false, false, errors.New("--applier (applier.kind) frr,netlink: write netlink,frr: the links come first, FRR routes over them")
	}
	return false, false, nil
}
