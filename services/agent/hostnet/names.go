package hostnet

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Alias is the link alias (IFLA_IFALIAS) of every link the applier owns.
const Alias = "sluice"

// Name prefixes of owned links. A link is owned only when its name has one
// of these prefixes and its alias is Alias.
const (
	PrefixVXLAN   = "sl.v" // sl.v<vlan>: the VXLAN device of a layer2 network
	PrefixBridge  = "br.v" // br.v<vlan>: its bridge
	PrefixGateway = "gw.v" // gw.v<vlan>: its anycast gateway, a macvlan on the bridge
	PrefixVRF     = "vrf-" // vrf-<name>: a VRF device
	PrefixTable   = "tbl." // tbl.<table id>: a VRF device bound to a routing table
)

// ownedPrefixes are the name prefixes of owned links.
var ownedPrefixes = []string{PrefixVXLAN, PrefixBridge, PrefixGateway, PrefixVRF, PrefixTable}

// hasOwnedPrefix reports whether name starts with one of the owned prefixes.
// A link is owned when this holds and its alias is Alias.
func hasOwnedPrefix(name string) bool {
	for _, p := range ownedPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// MaxNameLen is the longest interface name Linux takes (IFNAMSIZ - 1).
const MaxNameLen = 15

// VXLANName is the VXLAN device of the layer2 network with vlan.
func VXLANName(vlan uint32) string { return PrefixVXLAN + strconv.FormatUint(uint64(vlan), 10) }

// BridgeName is the bridge of the layer2 network with vlan.
func BridgeName(vlan uint32) string { return PrefixBridge + strconv.FormatUint(uint64(vlan), 10) }

// GatewayName is the anycast gateway device (a macvlan on the bridge with
// the host's anycast MAC) of the layer2 network with vlan.
func GatewayName(vlan uint32) string { return PrefixGateway + strconv.FormatUint(uint64(vlan), 10) }

// TableName is the VRF device bound to routing table id (as the routing
// table intent asks for it, before any host offset).
func TableName(id uint32) string { return PrefixTable + strconv.FormatUint(uint64(id), 10) }

// VRFName is the VRF device of VRF vrf: vrf-<vrf> when that fits in 15
// characters, else vrf-<first 6 characters>-<4 hex digits of the name's
// FNV-1a hash>, so that long names stay distinct and stable.
func VRFName(vrf string) string {
	if len(PrefixVRF)+len(vrf) <= MaxNameLen {
		return PrefixVRF + vrf
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(vrf))
	head := strings.TrimRight(vrf[:6], "-")
	return fmt.Sprintf("%s%s-%04x", PrefixVRF, head, h.Sum32()&0xffff)
}
