package main

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/services/agent/hostnet"
)

// netlinkFlags are the host's network settings of the netlink applier
// (hostnet.Host) as flags; each given on the command line wins over the
// --config file's netlink section.
type netlinkFlags struct {
	file                                                                 string
	uplink, vtepAddress, anycastMAC, vrfs, routingDaemonFile, floodPeers string
	vxlanPort, tableOffset, vrfTableBase                                 uint64
	nodeAddresses                                                        multi
}

func (n *netlinkFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&n.file, "netlink-file", "", "netlink applier: YAML file of this host's own settings (the fields of the config file's netlink section), over that section; the flags below win over both. For settings that differ per node where one --config serves many (a DaemonSet)")
	fs.StringVar(&n.uplink, "uplink", "", "netlink applier: interface the VXLAN devices send from (netlink.uplink; this or --vtep-address is required)")
	fs.StringVar(&n.vtepAddress, "vtep-address", "", "netlink applier: the VXLAN devices' local address (netlink.vtepAddress)")
	fs.Uint64Var(&n.vxlanPort, "vxlan-port", hostnet.DefaultVXLANPort, "netlink applier: VXLAN UDP port (netlink.vxlanPort)")
	fs.Uint64Var(&n.tableOffset, "table-offset", 0, "netlink applier: added to every routingTable intent's table id (netlink.tableOffset)")
	fs.Uint64Var(&n.vrfTableBase, "vrf-table-base", hostnet.DefaultVRFTableBase, "netlink applier: first kernel table of VRFs no routingTable intent names (netlink.vrfTableBase)")
	fs.StringVar(&n.anycastMAC, "anycast-mac", hostnet.DefaultAnycastMAC, "netlink applier: MAC of every anycast gateway, the same on all nodes (netlink.anycastMAC)")
	fs.StringVar(&n.floodPeers, "flood-peers", "", "netlink applier: other nodes' VTEP addresses, comma-separated, for head-end replication without EVPN (netlink.floodPeers)")
	fs.Var(&n.nodeAddresses, "node-address", "netlink applier (repeatable): VLAN=CIDR, this node's own address in that layer2 network, e.g. 100=10.100.0.11/24 (netlink.nodeAddresses)")
	fs.StringVar(&n.vrfs, "vrfs", hostnet.VRFsKernel, "netlink applier: kernel (a VRF device per VRF; needs CONFIG_NET_VRF) or off (no tenant isolation) (netlink.vrfs)")
	fs.StringVar(&n.routingDaemonFile, "routing-daemon-file", "", "netlink applier: where VRF route import/export is written for the routing daemon, absolute path (netlink.routingDaemonFile)")
}

// host merges the flags given on the command line (set) over the file's
// settings, and validates the result. Errors name the flag or the field.
func (n *netlinkFlags) host(set map[string]bool, h hostnet.Host) (hostnet.Host, error) {
	var err error
	if n.file != "" {
		var own hostnet.Host
		b, err := os.ReadFile(n.file)
		if err != nil {
			return h, fmt.Errorf("--netlink-file: %w", err)
		}
		if err := yaml.UnmarshalStrict(b, &own); err != nil {
			return h, fmt.Errorf("--netlink-file %s: %w", n.file, err)
		}
		h = overHost(h, own)
	}
	if set["uplink"] {
		h.Uplink = n.uplink
	}
	if set["vtep-address"] {
		if h.VTEPAddress, err = netip.ParseAddr(n.vtepAddress); err != nil {
			return h, fmt.Errorf("--vtep-address %q: not an IP address", n.vtepAddress)
		}
	}
	if set["vxlan-port"] {
		if n.vxlanPort == 0 || n.vxlanPort > 65535 {
			return h, fmt.Errorf("--vxlan-port %d: want 1-65535", n.vxlanPort)
		}
		h.VXLANPort = uint16(n.vxlanPort)
	}
	if set["table-offset"] {
		if n.tableOffset > 1<<32-1 {
			return h, fmt.Errorf("--table-offset %d: larger than a table id", n.tableOffset)
		}
		h.TableOffset = uint32(n.tableOffset)
	}
	if set["vrf-table-base"] {
		if n.vrfTableBase > 1<<32-1 {
			return h, fmt.Errorf("--vrf-table-base %d: larger than a table id", n.vrfTableBase)
		}
		h.VRFTableBase = uint32(n.vrfTableBase)
	}
	if set["anycast-mac"] {
		h.AnycastMAC = n.anycastMAC
	}
	if set["flood-peers"] {
		h.FloodPeers = nil
		for p := range strings.SplitSeq(n.floodPeers, ",") {
			if p = strings.TrimSpace(p); p == "" {
				continue
			}
			a, err := netip.ParseAddr(p)
			if err != nil {
				return h, fmt.Errorf("--flood-peers: %q is not an IP address", p)
			}
			h.FloodPeers = append(h.FloodPeers, a)
		}
	}
	if len(n.nodeAddresses) > 0 {
		h.NodeAddresses = map[uint32]netip.Prefix{}
		for _, v := range n.nodeAddresses {
			vlan, cidr, ok := strings.Cut(v, "=")
			id, verr := strconv.ParseUint(vlan, 10, 32)
			pfx, perr := netip.ParsePrefix(cidr)
			switch {
			case !ok:
				return h, fmt.Errorf("--node-address %q: want VLAN=CIDR, e.g. 100=10.100.0.11/24", v)
			case verr != nil || id < 1 || id > 4094:
				return h, fmt.Errorf("--node-address %q: VLAN %q: want 1-4094", v, vlan)
			case perr != nil:
				return h, fmt.Errorf("--node-address %q: %q is not an address with its prefix length", v, cidr)
			}
			if _, dup := h.NodeAddresses[uint32(id)]; dup {
				return h, fmt.Errorf("--node-address: VLAN %d given twice", id)
			}
			h.NodeAddresses[uint32(id)] = pfx
		}
	}
	if set["vrfs"] {
		h.VRFs = n.vrfs
	}
	if set["routing-daemon-file"] {
		h.RoutingDaemonFile = n.routingDaemonFile
	}
	return h, h.Validate()
}

// netlinkApplier builds the netlink applier of h. With VRF devices (the
// default) it checks first that the kernel can make them, so that a host
// without CONFIG_NET_VRF fails at start, not at its first rollout. The
// check runs in a throwaway network namespace, which needs CAP_SYS_ADMIN:
// without it (a pod granted only NET_ADMIN and NET_RAW) the agent cannot
// tell, and starts with a warning; a kernel without VRFs then fails the
// first apply that needs one, with the same message.
func netlinkApplier(h hostnet.Host) (a *hostnet.Applier, warning string, err error) {
	if h.VRFs == "" || h.VRFs == hostnet.VRFsKernel {
		switch err := hostnet.ProbeVRF(); {
		case errors.Is(err, hostnet.ErrNoVRFSupport):
			return nil, "", fmt.Errorf("--applier netlink: %w", err)
		case err != nil:
			warning = fmt.Sprintf("could not check that the kernel makes VRF devices (%v): without CONFIG_NET_VRF the first apply of a VRF fails", err)
		}
	}
	a, err = hostnet.New(h)
	return a, warning, err
}

// overHost is base with every field own sets (non-zero) taken from own.
func overHost(base, own hostnet.Host) hostnet.Host {
	if own.Uplink != "" {
		base.Uplink = own.Uplink
	}
	if own.VTEPAddress.IsValid() {
		base.VTEPAddress = own.VTEPAddress
	}
	if own.VXLANPort != 0 {
		base.VXLANPort = own.VXLANPort
	}
	if own.TableOffset != 0 {
		base.TableOffset = own.TableOffset
	}
	if own.VRFTableBase != 0 {
		base.VRFTableBase = own.VRFTableBase
	}
	if own.AnycastMAC != "" {
		base.AnycastMAC = own.AnycastMAC
	}
	if own.FloodPeers != nil {
		base.FloodPeers = own.FloodPeers
	}
	if own.NodeAddresses != nil {
		base.NodeAddresses = own.NodeAddresses
	}
	if own.VRFs != "" {
		base.VRFs = own.VRFs
	}
	if own.RoutingDaemonFile != "" {
		base.RoutingDaemonFile = own.RoutingDaemonFile
	}
	return base
}
