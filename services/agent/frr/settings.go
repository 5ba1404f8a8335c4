package frr

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/services/agent/hostnet"
)

// Settings holds the node-local facts a NodeConfig does not carry: who
// this node is in BGP and whom it peers with. They come from `frr:` in the
// agent's --config (flags for the common ones); the json names are the
// names there.
type Settings struct {
	// ASN is this node's BGP autonomous system number (1-4294967295),
	// the same in every VRF.
	ASN uint32 `json:"asn"`
	// RouterID is the BGP router id (an IPv4 address), the same in every VRF.
	RouterID netip.Addr `json:"routerId"`
	// Neighbors are the BGP neighbours of the cluster VRF: with the default
	// cluster VRF, the underlay (leaf or spine, route reflector).
	Neighbors []Neighbor `json:"neighbors,omitempty"`
	// ClusterVRF is the FRR name of the VRF every tenant VRF leaks to and
	// from: "" or "default" for the default VRF, else a kernel VRF device
	// the operator provides (not one of sluice's vrf-* devices). Must be
	// the default VRF with vrfs: off.
	ClusterVRF string `json:"clusterVRF,omitempty"`
	// VRFs is hostnet.VRFsKernel ("" too) or hostnet.VRFsOff, and
	// TableOffset and VRFTableBase are the kernel-table rule: all three as
	// in the netlink applier's settings (hostnet.Host), from which the agent
	// copies them when both appliers run, so that FRR's VRFs are the
	// devices and tables netlink made.
	VRFs         string `json:"vrfs,omitempty"`
	TableOffset  uint32 `json:"tableOffset,omitempty"`
	VRFTableBase uint32 `json:"vrfTableBase,omitempty"`
}

// Neighbor is one BGP neighbour: an address, or an interface for an
// unnumbered session (IPv6 link-local, both address families).
type Neighbor struct {
	Address   netip.Addr `json:"address,omitzero"`
	Interface string     `json:"interface,omitempty"`
	// RemoteAS is the neighbour's ASN (1-4294967295), or "external" or
	// "internal" (any other ASN, or this node's).
	RemoteAS string `json:"remoteAS"`
	// ConnectRetry is the seconds between connection attempts (FRR's
	// `timers connect`; 0 = FRR's default, 120). A low value makes a peer
	// that starts late come up fast.
	ConnectRetry uint16 `json:"connectRetry,omitempty"`
}

// defaultVRF is FRR's name of the default VRF.
const defaultVRF = "default"

// id is how FRR's neighbor commands name n.
func (n Neighbor) id() string {
	if n.Interface != "" {
		return n.Interface
	}
	return n.Address.String()
}

// Validate reports every field that is wrong, each error naming the field
// by its json name. All errors match ErrInvalidSettings.
func (s Settings) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalidSettings, field, fmt.Sprintf(format, args...)))
	}
	if s.ASN == 0 {
		bad("asn", "is required: this node's BGP autonomous system number, 1-4294967295")
	}
	switch r := s.RouterID; {
	case !r.IsValid():
		bad("routerId", "is required: the BGP router id, an IPv4 address such as the node's loopback or VTEP address")
	case !r.Is4() || r.IsUnspecified() || r.IsMulticast() || r == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		bad("routerId", "%s is not a unicast IPv4 address; BGP router ids are IPv4", r)
	}
	seen := map[string]int{}
	for i, n := range s.Neighbors {
		field := fmt.Sprintf("neighbors[%d]", i)
		switch {
		case n.Interface == "" && !n.Address.IsValid():
			bad(field, "one of address and interface is required")
		case n.Interface != "" && n.Address.IsValid():
			bad(field, "give address or interface, not both: an interface neighbour is an unnumbered session")
		case n.Interface != "" && !validIfName(n.Interface):
			bad(field+".interface", "%q is not an interface name (1-%d characters, no '/', '%%' or spaces)", n.Interface, hostnet.MaxNameLen)
		case n.Address.IsValid() && (n.Address.IsUnspecified() || n.Address.IsMulticast() || n.Address.IsLoopback() || n.Address.Zone() != ""):
			bad(field+".address", "%s is not a unicast address (for a link-local session give the interface instead)", n.Address)
		}
		if err := validRemoteAS(n.RemoteAS); err != nil {
			bad(field+".remoteAS", "%v", err)
		}
		if n.Interface != "" || n.Address.IsValid() {
			id := n.id()
			if j, ok := seen[id]; ok {
				bad(field, "%s is neighbors[%d] again", id, j)
			}
			seen[id] = i
		}
	}
	offVRFs := s.VRFs == hostnet.VRFsOff
	switch c := s.ClusterVRF; {
	case c == "" || c == defaultVRF:
	case offVRFs:
		bad("clusterVRF", "%q needs kernel VRFs, but vrfs is off: leave clusterVRF empty (the default VRF)", c)
	case !validIfName(c):
		bad("clusterVRF", "%q is not a VRF device name (1-%d characters, no '/', '%%' or spaces)", c, hostnet.MaxNameLen)
	case strings.HasPrefix(c, hostnet.PrefixVRF):
		bad("clusterVRF", "%q has the prefix %q of the VRF devices sluice makes for intents; name the operator's cluster VRF otherwise", c, hostnet.PrefixVRF)
	}
	if v := s.VRFs; v != "" && v != hostnet.VRFsKernel && !offVRFs {
		bad("vrfs", "%q is not %q or %q", v, hostnet.VRFsKernel, hostnet.VRFsOff)
	}
	if b := s.VRFTableBase; b != 0 && (b < 256 || uint64(b)+hostnet.VRFTableSpan-1 > math.MaxUint32) {
		bad("vrfTableBase", "%d is outside 256-%d (take the netlink settings' vrfTableBase)", b, math.MaxUint32-hostnet.VRFTableSpan+1)
	}
	return errors.Join(errs...)
}

// clusterVRF is the FRR name of the cluster VRF.
func (s Settings) clusterVRF() string {
	if s.ClusterVRF == "" {
		return defaultVRF
	}
	return s.ClusterVRF
}

// kernelVRFs reports whether each VRF is a kernel VRF device.
func (s Settings) kernelVRFs() bool { return s.VRFs != hostnet.VRFsOff }

// validRemoteAS checks a neighbour's remote-as.
func validRemoteAS(s string) error {
	switch s {
	case "":
		return errors.New(`is required: the neighbour's ASN, "external" or "internal"`)
	case "external", "internal":
		return nil
	}
	if n, err := strconv.ParseUint(s, 10, 32); err != nil || n == 0 {
		return fmt.Errorf(`%q is not an ASN 1-4294967295, "external" or "internal"`, s)
	}
	return nil
}

func validIfName(s string) bool {
	return s != "" && len(s) <= hostnet.MaxNameLen && !strings.ContainsAny(s, "/% \t\n")
}
